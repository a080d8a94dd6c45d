"""The shared-memory segment against another local user and planted names (one process).

Each test here failed on the transport as it was (segment created with ``open(path, "wb")``:
the process umask's mode, no ``O_EXCL``/``O_NOFOLLOW``, a peer opened whatever the name held).
"""
import os
import stat
import subprocess
import uuid

import pytest

from torchair_dist.cpu import shm_segment

SIZE = shm_segment.segment_bytes(2, 4096)


def _as_nobody(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a child that drops to the unprivileged user ``nobody`` first."""
    import pwd

    uid = pwd.getpwnam("nobody").pw_uid

    def drop():
        os.setgroups([])
        os.setgid(pwd.getpwnam("nobody").pw_gid)
        os.setuid(uid)

    return subprocess.run([SYSTEM_PYTHON, "-c", code], capture_output=True, text=True,
                          timeout=60, preexec_fn=drop, cwd="/")


# the child runs as 'nobody', who may not reach this venv's interpreter (under /root): a
# system interpreter, which needs nothing but builtins for these probes
SYSTEM_PYTHON = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3")
                      if os.access(p, os.X_OK)), None)
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or SYSTEM_PYTHON is None,
    reason="playing another local user needs root (to switch to 'nobody') and a system python3")


@pytest.fixture
def umask_000():
    old = os.umask(0)
    yield
    os.umask(old)


def test_segment_is_private_under_umask_000(umask_000):
    path, mm = shm_segment._create_segment(SIZE)
    try:
        st = os.stat(path)
        assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
        assert st.st_size == SIZE
    finally:
        mm.close()
        os.unlink(path)


@needs_root
@pytest.mark.parametrize("how", ["rb", "r+b"])
def test_another_user_can_neither_read_nor_write_the_segment(umask_000, how):
    path, mm = shm_segment._create_segment(SIZE)
    mm[:8] = b"secret!!"
    try:
        out = _as_nobody(f"open({path!r}, {how!r}).read(8)")
        assert out.returncode != 0 and "PermissionError" in out.stderr, out
        assert mm[:8] == b"secret!!"
    finally:
        mm.close()
        os.unlink(path)


def _fixed_name(monkeypatch):
    fixed = uuid.UUID(int=0x1234)
    monkeypatch.setattr(shm_segment.uuid, "uuid4", lambda: fixed)
    return f"{shm_segment.SEGMENT_PREFIX}{fixed.hex}"


def test_a_planted_symlink_is_never_followed(tmp_path, monkeypatch):
    """A link planted at the segment's name (pointing at a file root may write) is refused:
    the target is neither truncated nor written."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    path = _fixed_name(monkeypatch)
    os.symlink(victim, path)
    try:
        with pytest.raises(FileExistsError):
            shm_segment._create_segment(SIZE)
        assert victim.read_text() == "precious"
        assert os.path.islink(path)  # left as it was: not ours to remove
    finally:
        os.unlink(path)


def test_a_squatted_name_is_never_opened(monkeypatch):
    path = _fixed_name(monkeypatch)
    with open(path, "wb") as f:
        f.write(b"\0" * SIZE)
    try:
        with pytest.raises(FileExistsError):
            shm_segment._create_segment(SIZE)
    finally:
        os.unlink(path)


@pytest.mark.parametrize("problem", ["mode", "size", "link", "name"])
def test_a_peer_refuses_a_file_that_is_not_this_jobs_segment(tmp_path, problem):
    path = f"{shm_segment.SEGMENT_PREFIX}{uuid.uuid4().hex}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, SIZE)
    os.close(fd)
    target = path
    try:
        if problem == "mode":
            os.chmod(path, 0o666)
        elif problem == "size":
            os.truncate(path, SIZE // 2)
        elif problem == "link":
            target = f"{shm_segment.SEGMENT_PREFIX}{uuid.uuid4().hex}"
            os.symlink(path, target)
        elif problem == "name":
            target = str(tmp_path / "elsewhere")
            os.symlink(path, target)
        if problem == "link":
            with pytest.raises(OSError):  # O_NOFOLLOW: ELOOP
                shm_segment._open_segment(target, SIZE)
        else:
            with pytest.raises(shm_segment._Refused) as info:
                shm_segment._open_segment(target, SIZE)
            assert target in str(info.value) or repr(target) in str(info.value)
    finally:
        for p in {path, target}:
            if os.path.lexists(p):
                os.unlink(p)


@needs_root
def test_a_peer_refuses_a_segment_owned_by_another_user():
    path = f"{shm_segment.SEGMENT_PREFIX}{uuid.uuid4().hex}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, SIZE)
    os.close(fd)
    import pwd

    os.chown(path, pwd.getpwnam("nobody").pw_uid, -1)
    try:
        with pytest.raises(shm_segment._Refused, match="owned by uid"):
            shm_segment._open_segment(path, SIZE)
    finally:
        os.unlink(path)
