"""The README's config reference is generated from the option definitions and up to date."""
import os

from torchair_dist.tools import docs as reference

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def test_readme_config_reference_is_current():
    text = open(README).read()
    assert reference.splice_all(text) == text, "run `make docs` to regenerate the config reference"


def test_reference_lists_every_option():
    from torchair_dist import CompilerConfig

    rendered = reference.render_config_reference()
    for path, _ in CompilerConfig().leaves():
        assert f"| `{path}` |" in rendered
