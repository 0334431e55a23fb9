"""Working folders are removed only when their owner is gone (:mod:`raylink.core.folder_ownership`):
owners are real subprocesses holding their folder's lock, killed with SIGKILL (no cleanup runs);
the RocksDB working folders and the driver's log folders use the same helper."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from raylink.core.folder_ownership import LOCK_FILE_NAME, OwnedFolder, is_owned, remove_unowned_folders

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent


def _env(**extra: str) -> dict:
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = str(ROOT.parent) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _owner(parent: Path, prefix: str) -> tuple[subprocess.Popen, str]:
    """A process that creates an owned folder under ``parent`` and lives until killed; its folder."""
    code = textwrap.dedent(
        f"""
        import sys
        from raylink.core.folder_ownership import OwnedFolder
        owned = OwnedFolder.create({str(parent)!r}, {prefix!r})
        print(owned.path, flush=True)
        sys.stdin.read()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_env()
    )
    return proc, proc.stdout.readline().strip()


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)


def test_a_live_owners_folder_is_never_removed_and_a_dead_owners_is(tmp_path):
    proc, path = _owner(tmp_path, "work-")
    try:
        assert os.path.basename(path).startswith("work-") and (Path(path) / LOCK_FILE_NAME).is_file()
        assert oct(os.stat(path).st_mode & 0o777) == "0o700"
        (Path(path) / "data").write_text("x")
        assert is_owned(path)
        assert remove_unowned_folders(str(tmp_path), "work-") == []
        assert (Path(path) / "data").read_text() == "x"
    finally:
        _kill(proc)
    assert not is_owned(path)
    assert remove_unowned_folders(str(tmp_path), "work-") == [path]
    assert os.listdir(tmp_path) == []


def test_an_owner_in_this_process_keeps_its_folder_until_it_releases_it(tmp_path):
    owned = OwnedFolder.create(str(tmp_path), "mine-")
    assert remove_unowned_folders(str(tmp_path), "mine-") == []  # another open of the lock file: refused
    owned.release()
    assert remove_unowned_folders(str(tmp_path), "mine-") == [owned.path]
    again = OwnedFolder.create(str(tmp_path), "mine-")
    again.release(remove=True)
    assert os.listdir(tmp_path) == []


def test_what_the_cleaner_leaves_alone(tmp_path):
    legacy = tmp_path / "work-pid1234-old"  # an older raylink's folder: no lock file, no owner
    legacy.mkdir()
    being_made = tmp_path / ".new-work-abc"  # a folder whose owner is about to lock it
    being_made.mkdir()
    other_prefix = tmp_path / "else-1"
    other_prefix.mkdir()
    link = tmp_path / "work-link"
    link.symlink_to(other_prefix)
    foreign = tmp_path / "work-foreign"
    foreign.mkdir()
    (foreign / LOCK_FILE_NAME).write_text("")
    os.chown(foreign, 65534, 65534)  # another user's (the suite runs as root)
    assert remove_unowned_folders(str(tmp_path), "work-") == [str(legacy)]
    assert sorted(os.listdir(tmp_path)) == [".new-work-abc", "else-1", "work-foreign", "work-link"]


def test_the_newest_folders_are_kept_whoever_owns_them(tmp_path):
    for i in range(5):
        OwnedFolder.create(str(tmp_path), f"run-{i}-").release()
    removed = remove_unowned_folders(str(tmp_path), "run-", keep=2)
    assert sorted(os.path.basename(p)[:6] for p in removed) == ["run-0-", "run-1-", "run-2-"]
    assert sorted(n[:6] for n in os.listdir(tmp_path)) == ["run-3-", "run-4-"]


def test_rocksdb_working_folders_of_a_live_process_survive_a_new_backend(tmp_path):
    from raylink.state.rocksdb_keyed_state_backend import RocksDBKeyedStateBackend
    from raylink.state.rocksdb_options import RocksDBSettings

    local = tmp_path / "local"
    local.mkdir()
    proc, live = _owner(local, "rocksdb-live-")
    dead, dead_path = _owner(local, "rocksdb-dead-")
    _kill(dead)
    try:
        backend = RocksDBKeyedStateBackend((0, 127), 128, RocksDBSettings(str(local)))
        mine = os.path.basename(backend._resources.folder)
        assert sorted(os.listdir(local)) == sorted([os.path.basename(live), mine])
        backend.dispose()
        assert os.listdir(local) == [os.path.basename(live)]
    finally:
        _kill(proc)


def test_driver_log_folders_of_running_programs_are_kept(tmp_path):
    """21 older run folders, one of them held by a running program: a new driver keeps the 20
    newest and the running one, whatever their order."""
    run_dir = tmp_path / "xdg"
    run_dir.mkdir(mode=0o700)
    logs = run_dir / "raylink" / "logs"
    logs.mkdir(parents=True, mode=0o700)
    (run_dir / "raylink").chmod(0o700)
    proc, live = _owner(logs, "run-20000101-000000-1-")  # the oldest name, but its program runs
    try:
        for i in range(21):
            OwnedFolder.create(str(logs), f"run-20000102-0000{i:02d}-2-").release()
        code = "from raylink.runtime.logging_setup import run_log_dir; print(run_log_dir())"
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=_env(XDG_RUNTIME_DIR=str(run_dir)),
            check=True,
            timeout=60,
        ).stdout.strip()
        names = sorted(os.listdir(logs))
        assert os.path.basename(out) in names and os.path.basename(live) in names
        # 20 kept by age (the new one among them) and the live one; the 2 oldest dead ones are gone
        assert len(names) == 21
        assert not any(n.startswith("run-20000102-000000-") or n.startswith("run-20000102-000001-") for n in names)
    finally:
        _kill(proc)


def test_a_cleaner_racing_the_creation_of_folders_never_removes_one(tmp_path):
    """Owners create folders while a cleaner sweeps the same parent without pause: every folder
    created exists with its lock held until released (the lock file is locked before it is
    visible under its name; an earlier version let a cleaner take it first and delete the folder)."""
    import threading

    stop = threading.Event()
    removed: list = []

    def clean() -> None:
        while not stop.is_set():
            removed.extend(remove_unowned_folders(str(tmp_path), "race-"))

    cleaner = threading.Thread(target=clean, daemon=True)
    cleaner.start()
    try:
        owned = [OwnedFolder.create(str(tmp_path), "race-") for _ in range(300)]
    finally:
        stop.set()
        cleaner.join(timeout=30)
    assert not cleaner.is_alive()
    assert removed == []
    assert all(os.path.isdir(o.path) and is_owned(o.path) for o in owned)
    for o in owned:
        o.release(remove=True)
    assert remove_unowned_folders(str(tmp_path), "race-") == []
