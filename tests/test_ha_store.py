"""The high-availability store (``runtime/job/high_availability.py``) on its own: what one
JobMaster writes, a new one (new objects over the same folder) reads back; a configuration
asking for high availability without a folder is refused naming the keys."""

from __future__ import annotations

import os
import stat

import pytest

from raylink.api import Configuration
from raylink.api.options import IllegalConfigurationError
from raylink.runtime.job.high_availability import (
    HighAvailabilityServices,
    create_ha_services,
    ha_enabled,
    serialize_program,
)
from raylink.state.savepoint_targets import UnsafeSavepointError


def test_none_is_the_default_and_filesystem_needs_a_storage_dir(tmp_path):
    assert not ha_enabled(Configuration()) and create_ha_services(Configuration()) is None
    conf = Configuration().set_string("high-availability.type", "FILESYSTEM")  # enums: any case
    with pytest.raises(IllegalConfigurationError, match="high-availability.storageDir"):
        create_ha_services(conf)
    conf.set_string("high-availability.storageDir", str(tmp_path / "ha"))
    conf.set_string("high-availability.cluster-id", "prod")
    services = create_ha_services(conf)
    assert services.url == str(tmp_path / "ha" / "prod")


def test_unsupported_types_are_refused_naming_the_key():
    with pytest.raises(IllegalConfigurationError, match="high-availability.type"):
        Configuration().set_string("high-availability.type", "zookeeper")


def test_a_new_jobmaster_reads_back_graph_counter_and_latest_checkpoint(tmp_path):
    first = HighAvailabilityServices(str(tmp_path / "ha"))
    program = serialize_program({"vertices": [1, 2]}, {"k": "v"})
    first.get_job_graph_store().put_job_graph("job-a", program)
    counter = first.create_checkpoint_id_counter("job-a")
    assert [counter.get_and_increment() for _ in range(3)] == [1, 2, 3]
    counter.set_count(2)  # never lowered
    store = first.create_completed_checkpoint_store("job-a")
    for checkpoint_id in range(1, 9):
        store.add_checkpoint(checkpoint_id, f"file:///chk/chk-{checkpoint_id}")

    again = HighAvailabilityServices(str(tmp_path / "ha"))  # the restarted JobMaster's view
    assert again.get_job_graph_store().get_job_ids() == ["job-a"]
    assert again.get_job_graph_store().recover_job_graph("job-a") == program
    assert again.create_checkpoint_id_counter("job-a").get() == 4
    recovered = again.create_completed_checkpoint_store("job-a")
    assert recovered.latest() == (8, "file:///chk/chk-8")
    assert recovered.checkpoint_ids() == [4, 5, 6, 7, 8]  # the newest five are kept
    assert not [n for n in os.listdir(tmp_path / "ha" / "default" / "checkpoints" / "job-a") if n.endswith(".tmp")]

    again.cleanup_job_data("job-a")  # globally terminal: nothing left to recover
    assert again.get_job_graph_store().get_job_ids() == []
    assert again.get_job_graph_store().recover_job_graph("job-a") is None
    assert again.create_checkpoint_id_counter("job-a").get() == 1
    assert again.create_completed_checkpoint_store("job-a").latest() is None


def test_a_job_graph_others_could_have_written_is_not_unpickled(tmp_path):
    services = HighAvailabilityServices(str(tmp_path / "ha"))
    services.get_job_graph_store().put_job_graph("job-b", serialize_program("graph", {}))
    folder = tmp_path / "ha" / "default" / "jobgraphs"
    folder.chmod(folder.stat().st_mode | stat.S_IWOTH)  # anyone may replace the program
    with pytest.raises(UnsafeSavepointError):
        services.get_job_graph_store().recover_job_graph("job-b")
