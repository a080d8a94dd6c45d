"""The cache's files on disk: paths, ownership/permission checks, locking, atomic writes and the
hash-checked ``index.json`` -> ``entry-{signature}.json`` records (see the package docstring's
*Safety* section)."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import tempfile
from typing import Dict, List, Optional

from ..errors import CacheRejectedError

FORMAT_VERSION = 4  # 2: process groups stored by ranks (cache/groups.py); 3: entries record
# the model key they were saved under; 4: entries carry the backend's handle
CACHE_HOME_ENV = "TORCHAIR_CACHE_HOME"
INDEX = "index.json"
_ENTRY_FILE_RE = re.compile(r"entry-[0-9a-f]{32}\.json")


# ================================================================= paths
def cache_root(cache_dir: Optional[str]) -> str:
    """``cache_dir``, else ``$TORCHAIR_CACHE_HOME``, else ``./.torchair_cache`` (absolute)."""
    return os.path.abspath(cache_dir or os.environ.get(CACHE_HOME_ENV) or ".torchair_cache")


def rank_dir_name(world: int, global_rank: int, tp_rank: Optional[int] = None,
                  pp_rank: Optional[int] = None) -> str:
    """``world{W}global_rank{r}[_tp_rank{t}][_pp_rank{p}]``."""
    name = f"world{world}global_rank{global_rank}"
    name += f"_tp_rank{tp_rank}" if tp_rank is not None else ""
    name += f"_pp_rank{pp_rank}" if pp_rank is not None else ""
    return name


# ================================================================= safe filesystem access
def _check_dir(path: str) -> None:
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path):
        raise CacheRejectedError(f"{path} is not a plain directory (symlinks are refused)")
    if st.st_uid != os.geteuid():
        raise CacheRejectedError(f"{path} is owned by uid {st.st_uid}, not by the current user "
                                 f"(uid {os.geteuid()})")
    if st.st_mode & 0o022:
        raise CacheRejectedError(f"{path} is writable by group/others (mode "
                                 f"{st.st_mode & 0o777:o}); chmod go-w it")


def check_dirs(root: str, parts: List[str]) -> str:
    """Check ``root`` and every level of ``root/parts...`` (nothing is created); returns the
    full path."""
    path = root
    _check_dir(path)
    for part in parts:
        path = os.path.join(path, part)
        _check_dir(path)
    return path


def _ensure_dirs(root: str, parts: List[str]) -> str:
    """Create ``root/parts...`` (0700) and check every level; returns the full path."""
    os.makedirs(root, mode=0o700, exist_ok=True)
    _check_dir(root)
    path = root
    for part in parts:
        path = os.path.join(path, part)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        _check_dir(path)
    return path


def read_checked(path: str) -> bytes:
    """The bytes of ``path`` if it is a regular file of ours with mode exactly 0600."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise CacheRejectedError(f"cannot open {path} ({exc.strerror}; symlinks are refused)")
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_uid != os.geteuid():
            raise CacheRejectedError(f"{path} is owned by uid {st.st_uid}, not by the current "
                                     f"user (uid {os.geteuid()})")
        if (st.st_mode & 0o7777) != 0o600:
            raise CacheRejectedError(f"{path} has mode {st.st_mode & 0o7777:o}; cache files "
                                     f"must be 0600 (owner-only)")
        return f.read()


def write_atomic(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def locked(directory: str, exclusive: bool):
    fd = os.open(os.path.join(directory, ".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW,
                 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # releases the lock


def _parse(raw: bytes, what: str) -> Dict:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CacheRejectedError(f"{what} is not valid JSON (corrupt): {exc}") from None
    if not isinstance(data, dict):
        raise CacheRejectedError(f"{what} is not a JSON object (corrupt)")
    return data


# ================================================================= index + entry files
def read_indexed(directory: str, sig: str) -> Optional[Dict]:
    """The parsed entry file the index records for ``sig`` after its sha256 matched the
    index; None if the index has no such record; CacheRejectedError if anything is unsafe.
    The caller has checked ``directory``'s path (:func:`check_dirs`)."""
    with locked(directory, exclusive=False):
        index = _parse(read_checked(os.path.join(directory, INDEX)), "index")
        record = index.get("entries", {}).get(sig)
        if record is None:
            return None
        if not _ENTRY_FILE_RE.fullmatch(str(record.get("file"))):
            raise CacheRejectedError(f"index names a malformed file {record.get('file')!r}")
        raw = read_checked(os.path.join(directory, record["file"]))
    digest = hashlib.sha256(raw).hexdigest()
    if digest != record.get("sha256"):
        raise CacheRejectedError(f"{record['file']}: content hash {digest[:12]}... does not "
                                 f"match the index ({str(record.get('sha256'))[:12]}...): "
                                 f"corrupt or tampered")
    return _parse(raw, record["file"])


def write_indexed(root: str, parts: List[str], sig: str, data: Dict, versions: Dict) -> None:
    """Write ``data`` as ``root/parts.../entry-{sig}.json`` and record it (sha256, versions)
    in the index, under the directory's exclusive lock."""
    directory = _ensure_dirs(root, parts)
    raw = json.dumps(data, sort_keys=True).encode()
    name = f"entry-{sig}.json"
    with locked(directory, exclusive=True):
        write_atomic(os.path.join(directory, name), raw)
        index_path = os.path.join(directory, INDEX)
        try:
            index = _parse(read_checked(index_path), "index")
        except (CacheRejectedError, OSError):
            index = {}  # absent, or refused: rewritten from scratch (it is our directory)
        entries = index.get("entries") if isinstance(index.get("entries"), dict) else {}
        entries[sig] = {"file": name, "sha256": hashlib.sha256(raw).hexdigest(),
                        "versions": versions}
        write_atomic(index_path, json.dumps({"format": FORMAT_VERSION,
                                             "entries": entries}, sort_keys=True).encode())
