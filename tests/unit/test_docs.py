"""The documentation's generated sections are rendered from the code and up to date, and the
README keeps its contract (short, the CI's test command)."""
import os

from torchair_dist.tools import docs as reference

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_generated_pages_are_current():
    assert reference.stale_pages(ROOT) == [], "run `make docs` to regenerate these pages"


def test_reference_lists_every_option():
    from torchair_dist import CompilerConfig

    rendered = reference.render_config_reference()
    for path, _ in CompilerConfig().leaves():
        assert f"| `{path}` |" in rendered


def test_every_generated_page_is_in_the_site():
    nav = open(os.path.join(ROOT, "mkdocs.yml")).read()
    for page in list(reference.PAGES) + ["docs/coverage/opinfo.md"]:
        assert page.startswith("docs/") and page[len("docs/"):] in nav, page


def test_readme_is_short_and_names_the_ci_test_command():
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert len(readme.splitlines()) <= 300
    assert "make test" in readme and "make demo" in readme
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    assert "\nmake test\n" in ci and "\nmake docs-site\n" in ci
