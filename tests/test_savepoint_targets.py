"""Savepoints go only where the job's owner configured, are private on disk, and are restored
only when no other user could have changed them (:mod:`raylink.state.savepoint_targets`).

End to end: a job's REST server refuses (400) a savepoint to an ``http://`` URL -- a listener
there receives nothing -- and to a folder outside the configured roots, where nothing is created;
a savepoint under ``state.savepoints.dir`` is written with folders 0700 and files 0600. A
savepoint another user made writable (or owns) is refused on restore, naming the paths; the
same savepoint, made private again, restores to the exact result. A target under a root another
user owns (a real process as uid 65534 made it), or under a folder others may write, is refused
(400 over REST), nothing written; a sticky folder as /tmp above the root is fine for targets and
restores alike, and a folder another user slips in after the check is refused on writing.
"""

from __future__ import annotations

import http.server
import os
import stat
import threading
from pathlib import Path
from typing import Iterator

import pytest

from raylink.core.configuration import Configuration
from raylink.state.savepoint_targets import (
    SavepointTargetError,
    UnsafeSavepointError,
    allowed_schemes,
    check_restorable,
    check_savepoint_target,
)

NOBODY = 65534


def _roots(tmp_path: Path) -> Configuration:
    conf = Configuration()
    conf.set_string("state.savepoints.dir", str(tmp_path / "sp"))
    conf.set_string("execution.checkpointing.dir", str(tmp_path / "chk"))
    conf.set_string("rest.savepoint.allowed-roots", f"{tmp_path / 'extra'}, memory://bucket/savepoints")
    return conf


# -- targets ----------------------------------------------------------------------------------------------
def test_targets_under_a_configured_root_are_accepted(tmp_path):
    conf = _roots(tmp_path)
    assert check_savepoint_target(None, conf) is None  # the configured default
    for inside in ("sp", "sp/a/b", "chk/job", "extra", "extra/x"):
        assert check_savepoint_target(str(tmp_path / inside), conf) == str(tmp_path / inside)
    assert check_savepoint_target(f"file://{tmp_path / 'sp' / 'x'}", conf) == str(tmp_path / "sp" / "x")
    assert check_savepoint_target("memory://bucket/savepoints/one", conf) == "memory://bucket/savepoints/one"
    assert allowed_schemes(conf) == {"file", "local", "memory"}


@pytest.mark.parametrize(
    "target, why",
    [
        ("/tmp/theirs/x", "is not under a configured savepoint root"),
        ("{tmp}/spx", "is not under a configured savepoint root"),  # a sibling sharing the prefix
        ("{tmp}/sp/../elsewhere", "is not under a configured savepoint root"),
        ("{tmp}/sp/link/x", "is not under a configured savepoint root"),  # a link out of the root
        ("http://127.0.0.1:9/exfil", "uses the scheme 'http', which is not allowed"),
        ("s3://bucket/x", "uses the scheme 's3', which is not allowed"),
        ("memory://bucket/other", "is not under a configured savepoint root"),
        ("memory://bucket/savepoints/../other", "holds a '..' segment"),
        ("simplecache::file:///tmp/x", "chained fsspec URL"),
        ("", "is empty"),
    ],
)
def test_targets_elsewhere_are_refused_naming_the_options(tmp_path, target, why):
    conf = _roots(tmp_path)
    (tmp_path / "sp").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "sp" / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(SavepointTargetError, match=why) as caught:
        check_savepoint_target(target.format(tmp=tmp_path), conf)
    assert isinstance(caught.value, ValueError)
    if "root" in why:
        assert "state.savepoints.dir" in str(caught.value) and "rest.savepoint.allowed-roots" in str(caught.value)
    if "scheme" in why:
        assert "rest.savepoint.allowed-schemes" in str(caught.value)


def _as_nobody(*argv: str) -> None:
    """Run ``argv`` as another local user (uid 65534, a real process)."""
    import subprocess

    def drop() -> None:
        os.setgid(NOBODY)
        os.setuid(NOBODY)

    subprocess.run(argv, preexec_fn=drop, check=True, timeout=30)  # noqa: PLW1509


@pytest.fixture
def sticky_tmp() -> Iterator[Path]:
    """A folder as /tmp (root's, mode 1777, in /tmp) another user can create folders in."""
    import shutil
    import tempfile

    shared = Path(tempfile.mkdtemp(dir="/tmp", prefix="raylink-sticky-"))
    shared.chmod(0o1777)
    try:
        yield shared
    finally:
        shutil.rmtree(shared, ignore_errors=True)


needs_root = pytest.mark.skipif(os.getuid() != 0, reason="acting as another user needs root (the suite runs as root)")


@needs_root
def test_a_root_another_user_owns_is_refused_and_nothing_is_written(sticky_tmp):
    shared = sticky_tmp
    squat = shared / "squatroot"
    _as_nobody("mkdir", "-m", "777", str(squat))
    conf = Configuration()
    conf.set_string("rest.savepoint.allowed-roots", str(squat))
    with pytest.raises(SavepointTargetError) as caught:
        check_savepoint_target(str(squat / "sp"), conf)
    assert str(caught.value) == (
        f"savepoint: savepoint target {str(squat / 'sp')!r} is refused: {squat} is owned by uid {NOBODY}, so "
        f"another user could rename, delete or swap the savepoint; its root {squat} is set by "
        f"rest.savepoint.allowed-roots; use a root only you (or root) own and can write (chmod go-w); nothing was written"
    )
    assert os.listdir(squat) == []


@needs_root
def test_a_folder_another_user_slips_into_a_sticky_root_is_refused_on_writing(sticky_tmp):
    """A sticky root of ours (as /tmp) is accepted, but a folder another user creates in it --
    before the target is checked or between the check and the write -- is refused, nothing in it."""
    import fsspec

    root = sticky_tmp
    conf = Configuration()
    conf.set_string("state.savepoints.dir", str(root))
    assert check_savepoint_target(str(root / "sp"), conf) == str(root / "sp")
    _as_nobody("mkdir", "-m", "755", str(root / "sp"))  # after the check
    with pytest.raises(SavepointTargetError, match=rf"refusing to write into {root / 'sp' / 'x'}: "):
        from raylink.state.savepoint_targets import make_private_dirs

        make_private_dirs(fsspec.filesystem("file"), str(root / "sp" / "x"))
    assert os.listdir(root / "sp") == []
    with pytest.raises(SavepointTargetError, match=rf"{root / 'sp'} is owned by uid {NOBODY}.*state.savepoints.dir"):
        check_savepoint_target(str(root / "sp" / "y"), conf)


def test_a_group_writable_folder_inside_the_root_is_refused(tmp_path):
    conf = _roots(tmp_path)
    (tmp_path / "sp" / "team").mkdir(parents=True)
    (tmp_path / "sp" / "team").chmod(0o775)
    with pytest.raises(SavepointTargetError) as caught:
        check_savepoint_target(str(tmp_path / "sp" / "team" / "a"), conf)
    message = str(caught.value)
    assert f"{tmp_path / 'sp' / 'team'} is writable by its group or others (mode 0o775)" in message
    assert (
        f"its root {tmp_path / 'sp'} is set by execution.checkpointing.savepoint-dir (state.savepoints.dir)" in message
        and "nothing was written" in message
    )
    assert os.listdir(tmp_path / "sp" / "team") == []
    (tmp_path / "sp" / "team").chmod(0o700)  # private again: accepted
    assert check_savepoint_target(str(tmp_path / "sp" / "team" / "a"), conf) == str(tmp_path / "sp" / "team" / "a")


def test_a_sticky_folder_above_the_root_is_fine_for_targets_and_restores(tmp_path):
    shared = tmp_path / "tmp-like"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp
    root = shared / "mine"
    root.mkdir(mode=0o700)
    conf = Configuration()
    conf.set_string("rest.savepoint.allowed-roots", str(root))
    assert check_savepoint_target(str(root / "sp"), conf) == str(root / "sp")
    folder = _savepoint_folder(root)
    assert check_restorable(str(folder)) is None
    shared.chmod(0o777)  # not sticky: refused on both sides, naming it
    with pytest.raises(SavepointTargetError, match=rf"{shared} is writable by its group or others \(mode 0o777\)"):
        check_savepoint_target(str(root / "sp"), conf)
    with pytest.raises(UnsafeSavepointError, match=rf"{shared} is writable by its group or others \(mode 0o777\)"):
        check_restorable(str(folder))


def test_without_any_root_every_named_target_is_refused(tmp_path):
    with pytest.raises(SavepointTargetError, match="no root is configured"):
        check_savepoint_target(str(tmp_path / "sp"), Configuration())
    assert allowed_schemes(Configuration()) == {"file", "local"}


# -- restores ---------------------------------------------------------------------------------------------
def _savepoint_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "sp" / "savepoint-abc"
    (folder / "shared").mkdir(parents=True)
    (folder / "_metadata").write_bytes(b"m")
    (folder / "op-0").write_bytes(b"s")
    (folder / "shared" / "1.sst").write_bytes(b"t")
    return folder


def test_a_private_savepoint_is_restorable(tmp_path):
    folder = _savepoint_folder(tmp_path)
    for location in (folder, folder / "_metadata"):  # accepted: no UnsafeSavepointError
        assert check_restorable(str(location)) is None


@pytest.mark.parametrize(
    "what, change",
    [
        ("the folder", lambda f: f.chmod(0o777)),
        ("a state file", lambda f: (f / "op-0").chmod(0o666)),
        ("a shared file", lambda f: (f / "shared" / "1.sst").chmod(0o664)),
        ("the metadata, owned by another user", lambda f: os.chown(f / "_metadata", NOBODY, NOBODY)),
        ("a folder above it", lambda f: f.parent.chmod(0o777)),
    ],
)
def test_a_savepoint_another_user_could_change_is_refused_naming_the_paths(tmp_path, what, change):
    folder = _savepoint_folder(tmp_path)
    change(folder)
    with pytest.raises(UnsafeSavepointError) as caught:
        check_restorable(str(folder))
    message = str(caught.value)
    assert message.startswith(f"refusing to restore from {folder}: restoring unpickles its files")
    expected = {
        "the folder": f"{folder} is writable by its group or others (mode 0o777)",
        "a state file": f"{folder / 'op-0'} is writable by its group or others (mode 0o666)",
        "a shared file": f"{folder / 'shared' / '1.sst'} is writable by its group or others (mode 0o664)",
        "the metadata, owned by another user": f"{folder / '_metadata'} is owned by uid {NOBODY}",
        "a folder above it": f"{folder.parent} is writable by its group or others (mode 0o777)",
    }[what]
    assert caught.value.problems == [expected]


def test_a_sticky_folder_above_it_is_fine_and_state_files_outside_are_checked(tmp_path):
    folder = _savepoint_folder(tmp_path)
    folder.parent.chmod(0o1777)  # as /tmp
    check_restorable(str(folder))
    elsewhere = tmp_path / "retained-shared"
    elsewhere.mkdir()
    (elsewhere / "2.sst").write_bytes(b"x")
    (elsewhere / "2.sst").chmod(0o646)
    with pytest.raises(UnsafeSavepointError, match="2.sst is writable by its group or others"):
        check_restorable(str(folder), [str(elsewhere / "2.sst")])


# -- end to end: a job's REST server and a restore --------------------------------------------------------
class _Listener(http.server.BaseHTTPRequestHandler):
    received: list = []

    def do_PUT(self) -> None:  # noqa: N802 - http.server's name
        self.received.append(self.path)
        self.send_response(200)
        self.end_headers()

    do_POST = do_PUT  # noqa: N815

    def log_message(self, *args) -> None:
        pass


@pytest.mark.timeout(240)
def test_the_rest_api_writes_savepoints_only_under_the_roots_and_privately(tmp_path):
    from raylink.tests.runtime_jobs import make_env
    from raylink.tests.test_runtime_rest_figures import cancel, keyed_idle_job, wait_for
    from raylink.tests.test_runtime_rest_figures import http as rest

    listener = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Listener)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    roots, team = tmp_path / "savepoints", tmp_path / "team"
    config = {
        "raylink.rest.enabled": True,
        "rest.port": 0,
        "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
        "state.savepoints.dir": str(roots),
        "rest.savepoint.allowed-roots": str(team),
    }
    client = keyed_idle_job("local", config)
    try:
        jid = client.job_id
        refused = [
            f"http://127.0.0.1:{listener.server_address[1]}/exfil",
            str(tmp_path / "theirs" / "x"),
            str(roots / ".." / "theirs"),
        ]
        for target in refused:
            for route, body in (
                (f"/jobs/{jid}/savepoints", {"target-directory": target}),
                (f"/jobs/{jid}/savepoints", {"target-directory": target, "cancel-job": True}),
                (f"/jobs/{jid}/stop", {"targetDirectory": target}),
            ):
                status, answer = rest(client, route, "POST", body)
                assert status == 400, (route, target, status, answer)
                assert "savepoints.dir" in answer["errors"][0] or "allowed-schemes" in answer["errors"][0]
        assert _Listener.received == [] and not (tmp_path / "theirs").exists()
        team.mkdir()
        team.chmod(0o777)  # a configured root others may write
        status, answer = rest(client, f"/jobs/{jid}/savepoints", "POST", {"target-directory": str(team / "x")})
        assert status == 400, answer
        assert f"{team} is writable by its group or others (mode 0o777)" in answer["errors"][0]
        assert "rest.savepoint.allowed-roots" in answer["errors"][0] and os.listdir(team) == []
        assert str(client.get_job_status()) == "RUNNING"  # nothing stopped it
        status, answer = rest(client, f"/jobs/{jid}/savepoints", "POST", {"target-directory": str(roots / "ok")})
        assert status == 202, answer
        progress = f"/jobs/{jid}/savepoints/{answer['request-id']}"
        assert wait_for(lambda: rest(client, progress)[1]["status"]["id"] == "COMPLETED", client, 60)
        location = Path(rest(client, progress)[1]["operation"]["location"])
    finally:
        cancel(client)
        listener.shutdown()
    assert location.parent == roots / "ok" and (location / "_metadata").is_file()
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in [roots, roots / "ok", location, *location.rglob("*")]}
    assert all(mode == (0o700 if p.is_dir() else 0o600) for p, mode in modes.items()), modes

    # a job restoring from it is refused once another user owns a file in it, and runs once it is private
    def run_from_savepoint() -> list:
        conf = {"execution.savepoint.path": str(location), "execution.savepoint.ignore-unclaimed-state": True}
        env = make_env("local", 1, conf)
        with env.from_collection([1, 2, 3]).map(lambda x: x * 10).execute_and_collect() as records:
            return sorted(records)

    metadata = location / "_metadata"
    os.chown(metadata, NOBODY, NOBODY)
    with pytest.raises(UnsafeSavepointError, match=rf"{metadata} is owned by uid {NOBODY}"):
        run_from_savepoint()
    os.chown(metadata, os.getuid(), os.getgid())
    assert run_from_savepoint() == [10, 20, 30]


def test_the_checkpoint_storage_creates_private_folders(tmp_path):
    from raylink.state.checkpoint_storage import CheckpointStorage

    storage = CheckpointStorage(str(tmp_path / "checkpoints"), "job")
    storage.initialize_base_locations()
    storage.write_state(1, "op", 0, b"x" * 100_000)
    local = tmp_path / "local.sst"
    local.write_bytes(b"sst")
    storage.write_shared_file(1, str(local), "a.sst")
    folders = [tmp_path / "checkpoints", *(p for p in (tmp_path / "checkpoints").rglob("*") if p.is_dir())]
    assert {p.name for p in folders} == {"checkpoints", "job", "chk-1", "shared"}
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in folders), {p: oct(p.stat().st_mode) for p in folders}


@pytest.mark.skipif(os.getuid() != 0, reason="acting as another user needs root (the suite runs as root)")
def test_a_savepoint_planted_by_another_user_is_refused(tmp_path):
    """Another local user (uid 65534, a real process) plants a savepoint-shaped folder in a shared
    temp dir; a restore from it is refused, naming the folder and each of its files."""
    import shutil
    import subprocess
    import tempfile

    shared = Path(tempfile.mkdtemp(dir="/tmp", prefix="raylink-planted-"))
    shared.chmod(0o1777)
    try:

        def as_nobody() -> None:
            os.setgid(NOBODY)
            os.setuid(NOBODY)

        planted = shared / "savepoint-abc"
        script = f"umask 022 && mkdir {planted} && echo m > {planted}/_metadata && echo s > {planted}/op-0"
        subprocess.run(["sh", "-c", script], preexec_fn=as_nobody, check=True, timeout=30)  # noqa: PLW1509
        with pytest.raises(UnsafeSavepointError) as caught:
            check_restorable(str(planted))
        assert sorted(caught.value.problems) == [
            f"{planted} is owned by uid {NOBODY}",
            f"{planted / '_metadata'} is owned by uid {NOBODY}",
            f"{planted / 'op-0'} is owned by uid {NOBODY}",
        ]
    finally:
        shutil.rmtree(shared, ignore_errors=True)
