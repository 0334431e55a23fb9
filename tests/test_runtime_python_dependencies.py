"""``env.add_python_file`` / ``add_python_archive`` / ``set_python_requirements`` /
``set_python_executable`` reach the functions on every target; ``add_jars`` /
``add_classpaths`` are accepted with a warning (no JVM)."""

from __future__ import annotations

import os
import uuid
import zipfile

import pytest

from raylink.api import Configuration
from raylink.runtime.client.python_dependencies import (
    PYTHON_ARCHIVES,
    PYTHON_FILES,
    PYTHON_REQUIREMENTS,
    ray_runtime_env,
)
from raylink.tests.runtime_jobs import make_env

pytestmark = pytest.mark.timeout(180)


def _module(folder, name: str, body: str) -> str:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name + ".py")
    with open(path, "w") as f:
        f.write(body)
    return path


def _uses(module_name: str):
    """A map function importing ``module_name`` when it runs (on the TaskExecutor)."""

    def apply(value):
        import importlib

        return importlib.import_module(module_name).apply(value)

    return apply


def test_a_python_file_from_another_folder_is_importable_in_the_job(target, tmp_path):
    name = f"helper_{uuid.uuid4().hex[:8]}"
    path = _module(str(tmp_path / "elsewhere"), name, "def apply(x):\n    return x * 3 + 1\n")
    env = make_env(target, 2)
    env.add_python_file(path)
    got = sorted(env.from_sequence(1, 50).map(_uses(name)).execute_and_collect())
    assert got == [x * 3 + 1 for x in range(1, 51)]


def test_a_directory_and_a_zip_put_their_modules_on_the_path(target, tmp_path):
    pkg = f"pkg_{uuid.uuid4().hex[:8]}"
    mod = f"mod_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "lib"
    _module(str(folder / pkg), "__init__", "def apply(x):\n    return -x\n")
    zipped = tmp_path / "more.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr(f"{mod}.py", "def apply(x):\n    return x * 10\n")
    env = make_env(target, 1)
    env.add_python_file(str(folder)).add_python_file(str(zipped))
    got = list(env.from_collection([1, 2, 3]).map(_uses(pkg)).map(_uses(mod)).execute_and_collect())
    assert got == [-10, -20, -30]


@pytest.mark.parametrize("target", ["ray"], indirect=True)  # archives apply to the TaskExecutors' working directory
def test_an_archive_is_extracted_into_the_working_directory_on_ray(target, tmp_path):
    archive = tmp_path / "data.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("words/lookup.txt", "one\ntwo\nthree\n")
    env = make_env(target, 1)
    env.add_python_archive(str(archive), "mydata")

    def lookup(i):
        with open("mydata/words/lookup.txt") as f:
            return f.read().split()[i]

    assert list(env.from_collection([2, 0, 1]).map(lookup).execute_and_collect()) == ["three", "one", "two"]


# -- what the configuration holds and what Ray gets -----------------------------------------------------
def test_the_runtime_environment_of_every_kind_of_dependency(tmp_path):
    conf = Configuration()
    env = make_env("local", 1)
    env.configuration = conf
    single = _module(str(tmp_path / "a"), "single", "")
    _module(str(tmp_path / "dir"), "m1", "")
    os.makedirs(tmp_path / "dir" / "p1")
    os.makedirs(tmp_path / "dir" / "__pycache__")
    (tmp_path / "dir" / "notes.txt").write_text("not a module")
    archive = tmp_path / "env.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("bin/tool", "x")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# pinned\nsomething==1.0\n\nother>=2\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    env.add_python_file(single).add_python_file(str(tmp_path / "dir"))
    env.add_python_archive(str(archive)).add_python_archive(str(archive), "renamed")
    env.set_python_requirements(str(requirements), str(cache))
    env.set_python_executable("/opt/py/bin/python3")

    assert conf.get_string(PYTHON_FILES) == f"{single},{tmp_path / 'dir'}"
    assert conf.get_string(PYTHON_ARCHIVES) == f"{archive},{archive}#renamed"
    assert conf.get_string(PYTHON_REQUIREMENTS) == f"{requirements}#{cache}"
    runtime_env = ray_runtime_env(conf)
    assert runtime_env["py_modules"] == [single, str(tmp_path / "dir" / "m1.py"), str(tmp_path / "dir" / "p1")]
    working_dir = runtime_env["working_dir"]
    assert sorted(os.listdir(working_dir)) == ["env.zip", "renamed"]
    assert open(os.path.join(working_dir, "renamed", "bin", "tool")).read() == "x"
    assert runtime_env["pip"] == {
        "packages": ["something==1.0", "other>=2"],
        "pip_install_options": ["--no-index", "--find-links", str(cache)],
    }
    assert runtime_env["py_executable"] == "/opt/py/bin/python3"
    assert ray_runtime_env(Configuration()) == {}


def test_bad_dependencies_are_refused_naming_the_path(tmp_path):
    env = make_env("local", 1)
    with pytest.raises(FileNotFoundError, match=r"add_python_file: no such file or directory: .*missing\.py"):
        env.add_python_file(str(tmp_path / "missing.py"))
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match=r"data\.csv must be a \.py file, a directory, a \.zip or a \.whl"):
        env.add_python_file(str(tmp_path / "data.csv"))
    (tmp_path / "fake.zip").write_text("not a zip")
    with pytest.raises(ValueError, match=r"add_python_archive: .*fake\.zip is not a zip file"):
        env.add_python_archive(str(tmp_path / "fake.zip"))
    with pytest.raises(FileNotFoundError, match="set_python_requirements"):
        env.set_python_requirements(str(tmp_path / "requirements.txt"))


def test_jars_and_classpaths_are_accepted_with_a_warning():
    env = make_env("local", 1)
    with pytest.warns(
        UserWarning,
        match=r"add_jars\('file:///x/flink-sql-connector-kafka\.jar'\) is ignored: "
        r"raylink runs without a JVM",
    ):
        assert env.add_jars("file:///x/flink-sql-connector-kafka.jar") is env
    with pytest.warns(UserWarning, match=r"add_classpaths\('file:///a', 'file:///b'\) is ignored"):
        env.add_classpaths("file:///a", "file:///b")


def test_the_local_target_warns_about_what_it_cannot_apply(tmp_path, caplog):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("something\n")
    env = make_env("local", 1)
    env.set_python_requirements(str(requirements))
    with caplog.at_level("WARNING", logger="raylink.runtime.client.python_dependencies"):
        assert list(env.from_collection([1]).execute_and_collect()) == [1]
    assert "set_python_requirements is not applied on the local target" in caplog.text
    assert "pip install -r FILE" in caplog.text
