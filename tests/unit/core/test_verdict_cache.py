"""The exactness verdicts kept across processes (core/engines/worker/verdicts.py): what the
key holds for, the file a restarted service reads, a file that cannot be used, and two
processes loading one file at once (probe_once, with real processes)."""

from __future__ import annotations

import contextlib
import importlib.util
import multiprocessing
import os
import time
from collections.abc import Iterator
from multiprocessing.synchronize import Event
from pathlib import Path

import pytest

from lmsp_desktop.core.engines.base import LoadSettings
from lmsp_desktop.core.engines.worker import verdicts
from lmsp_desktop.core.engines.worker.verdicts import VerdictCache, probe_once, verdict_key


def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(64))
    return path


def test_the_key_changes_with_whatever_changes_the_numerics(tmp_path: Path) -> None:
    path = model_file(tmp_path)
    options = {"n_threads": 1, "parallel": 4}
    key = verdict_key(path, LoadSettings(context_length=2048), options)
    assert key == verdict_key(path, LoadSettings(context_length=2048), dict(options))
    others = {
        verdict_key(path, LoadSettings(context_length=2048, kv_type="q8_0"), options),
        verdict_key(path, LoadSettings(context_length=4096), options),
        verdict_key(path, LoadSettings(context_length=2048, gpu_layers=4), options),
        verdict_key(path, LoadSettings(context_length=2048), {**options, "n_threads": 2}),
        verdict_key(path, LoadSettings(context_length=2048), {**options, "n_batch": 256}),
    }
    assert key not in others and len(others) == 5
    os.utime(path, ns=(0, path.stat().st_mtime_ns + 1_000_000))  # the file was replaced
    assert verdict_key(path, LoadSettings(context_length=2048), options) != key
    assert verdict_key(tmp_path / "gone.gguf", None, options) is None


def test_the_same_file_under_another_name_keeps_its_verdict(tmp_path: Path) -> None:
    """A hard link (another app's store linking the same file), a symlink or a rename is
    the same file: its verdict holds. A copy is another file (probed again)."""
    path = model_file(tmp_path)
    key = verdict_key(path, None, {})
    os.link(path, tmp_path / "linked.gguf")
    (tmp_path / "symlinked.gguf").symlink_to(path)
    assert verdict_key(tmp_path / "linked.gguf", None, {}) == key
    assert verdict_key(tmp_path / "symlinked.gguf", None, {}) == key
    path.rename(tmp_path / "renamed.gguf")
    assert verdict_key(tmp_path / "renamed.gguf", None, {}) == key
    copy = tmp_path / "copy.gguf"
    copy.write_bytes((tmp_path / "renamed.gguf").read_bytes())
    assert verdict_key(copy, None, {}) != key


def test_the_key_changes_with_the_llama_build_and_the_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = model_file(tmp_path)
    key = verdict_key(path, None, {})
    monkeypatch.setattr(verdicts, "_llama_build", lambda: "0.0.0-other")
    assert verdict_key(path, None, {}) != key
    monkeypatch.undo()
    monkeypatch.setattr(verdicts, "PROBE_VERSION", verdicts.PROBE_VERSION + 1)
    assert verdict_key(path, None, {}) != key


def test_a_verdict_outlives_the_process_that_learnt_it(tmp_path: Path) -> None:
    file = tmp_path / "cache" / "exactness-verdicts.json"  # its directory made on demand
    first = VerdictCache(file)
    assert first.get("a") is None
    first.put("a", True)
    first.put("b", False)
    restarted = VerdictCache(file)  # another process: reads the file
    assert restarted.get("a") is True and restarted.get("b") is False
    assert restarted.get("c") is None
    assert [p.name for p in file.parent.iterdir()] == [file.name]  # no temporary left


def test_telling_the_same_verdict_again_does_not_rewrite_the_file(tmp_path: Path) -> None:
    file = tmp_path / "exactness-verdicts.json"
    cache = VerdictCache(file)
    cache.put("a", True)
    os.utime(file, ns=(0, 0))
    cache.put("a", True)  # every finished generation tells it again
    assert file.stat().st_mtime_ns == 0


def test_two_services_keep_each_others_verdicts(tmp_path: Path) -> None:
    file = tmp_path / "exactness-verdicts.json"
    one, two = VerdictCache(file), VerdictCache(file)
    one.put("a", True)
    two.put("b", True)  # reads the file before writing it: a's verdict stays
    assert VerdictCache(file).get("a") is True


def test_only_the_latest_verdicts_are_kept(tmp_path: Path) -> None:
    file = tmp_path / "exactness-verdicts.json"
    cache = VerdictCache(file)
    for n in range(verdicts.KEPT + 5):
        cache.put(f"k{n}", True)
    fresh = VerdictCache(file)
    assert fresh.get("k0") is None and fresh.get(f"k{verdicts.KEPT + 4}") is True


def test_a_damaged_or_foreign_file_is_an_empty_cache(tmp_path: Path) -> None:
    file = tmp_path / "exactness-verdicts.json"
    for text in ("{half", "[]", '{"version": 0, "verdicts": {"a": true}}', '{"verdicts": 3}'):
        file.write_text(text)
        cache = VerdictCache(file)
        assert cache.get("a") is None  # the probe runs
        cache.put("a", True)  # and its verdict replaces the file
        assert VerdictCache(file).get("a") is True


def test_a_cache_directory_that_cannot_be_written_only_costs_a_probe(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    cache = VerdictCache(blocker / "exactness-verdicts.json")
    cache.put("a", True)
    assert cache.get("a") is True  # this process still knows it
    assert VerdictCache(blocker / "exactness-verdicts.json").get("a") is None


def test_without_a_file_verdicts_live_in_memory(tmp_path: Path) -> None:
    cache = VerdictCache(None)
    cache.put("a", False)
    assert cache.get("a") is False
    assert list(tmp_path.iterdir()) == []


def test_a_rebuilt_llama_cpp_of_the_same_version_is_another_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reinstalled with other CMAKE_ARGS (say CUDA) at the same version: its libraries
    differ, and so does the key (a CPU build's verdict is not the GPU build's)."""
    package = tmp_path / "llama_cpp"
    (package / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    library = package / "lib" / "libggml-cpu.so"
    library.write_bytes(b"cpu kernels")
    found = importlib.util.spec_from_file_location("llama_cpp", package / "__init__.py")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: found)
    verdicts._llama_build.cache_clear()
    before = verdicts._llama_build()
    library.write_bytes(b"cuda kernels, rebuilt")
    verdicts._llama_build.cache_clear()
    assert verdicts._llama_build() != before
    verdicts._llama_build.cache_clear()


def test_files_on_a_file_system_without_inodes_do_not_share_a_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # FAT and some FUSE or network mounts report inode 0 for every file: two different
    # files of one size and time must not share a verdict there (review of a775f48).
    first, second = tmp_path / "a.gguf", tmp_path / "b.gguf"
    first.write_bytes(b"x" * 64)
    second.write_bytes(b"y" * 64)
    os.utime(second, ns=(first.stat().st_atime_ns, first.stat().st_mtime_ns))
    real_stat = Path.stat

    def without_inode(self: Path, **kwargs: object) -> os.stat_result:
        found = real_stat(self)
        fields = list(found)
        fields[1] = 0  # st_ino
        return os.stat_result(fields)

    monkeypatch.setattr(Path, "stat", without_inode)
    assert verdict_key(first, None, {}) != verdict_key(second, None, {})
    assert verdict_key(first, None, {}) == verdict_key(first, None, {})


def _probe(log: Path, probing: Event, seconds: float) -> bool:
    """The exactness probe as a process sees it: counted, then `seconds` of work."""
    with log.open("a") as out:
        out.write(f"{os.getpid()}\n")
    probing.set()
    time.sleep(seconds)
    return True


def _load(cache: Path, key: str, log: Path, probing: Event, after: bool, answer: Path) -> None:
    if after:  # the second load starts while the first probes
        probing.wait(60)
    answer.write_text(str(probe_once(cache, key, lambda: _probe(log, probing, 1))))


def test_two_processes_loading_one_file_at_once_probe_it_once(tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "exactness-verdicts.json"
    key = verdict_key(model_file(tmp_path), LoadSettings(context_length=2048), {"n_threads": 1})
    assert key is not None
    log, fork = tmp_path / "probes", multiprocessing.get_context("fork")
    probing = fork.Event()
    loads = [
        fork.Process(target=_load, args=(cache, key, log, probing, after, tmp_path / str(after)))
        for after in (False, True)
    ]
    for load in loads:
        load.start()
    for load in loads:
        load.join(60)
    assert [load.exitcode for load in loads] == [0, 0]
    assert len(log.read_text().split()) == 1  # one probe
    assert [(tmp_path / str(after)).read_text() for after in (False, True)] == ["True"] * 2
    assert VerdictCache(cache).get(key) is True  # kept for the next load


def _probe_until_killed(cache: Path, key: str, probing: Event) -> None:
    probe_once(cache, key, lambda: _probe(cache.parent / "killed", probing, 60))


def test_a_prober_killed_mid_probe_holds_no_load_up(tmp_path: Path) -> None:
    cache = tmp_path / "exactness-verdicts.json"
    fork = multiprocessing.get_context("fork")
    probing = fork.Event()
    killed = fork.Process(target=_probe_until_killed, args=(cache, "ab12", probing))
    killed.start()
    assert probing.wait(60)
    killed.kill()  # SIGKILL mid-probe: the lock goes with the process
    killed.join(60)
    # Not waited for at all (wait=0), the lock is free: the probe runs under it and its
    # verdict is kept (a load that could not take the lock probes without keeping it).
    assert probe_once(cache, "ab12", lambda: False, wait=0) is False
    assert VerdictCache(cache).get("ab12") is False


@contextlib.contextmanager
def another_process_probing(cache: Path, key: str) -> Iterator[None]:
    """A process in the middle of a long probe of `key` (killed at the end)."""
    fork = multiprocessing.get_context("fork")
    probing = fork.Event()
    slow = fork.Process(target=_probe_until_killed, args=(cache, key, probing))
    slow.start()
    try:
        assert probing.wait(60)
        yield
    finally:
        slow.kill()
        slow.join(60)


def test_a_load_waits_for_another_prober_no_longer_than_its_wait(tmp_path: Path) -> None:
    cache = tmp_path / "exactness-verdicts.json"
    with another_process_probing(cache, "ab12"):
        probed = []
        assert probe_once(cache, "ab12", lambda: probed.append(1) or True, wait=0.2) is True
        assert probed == [1]  # probed here, not told the other's verdict after its 60 s


def test_a_probe_of_another_file_is_not_waited_for(tmp_path: Path) -> None:
    """Keys are digests: two models' keys may share their first characters. A load of one
    must not wait for (nor give up keeping its verdict because of) the other's probe."""
    cache = tmp_path / "exactness-verdicts.json"
    with another_process_probing(cache, "ab12"):
        # Not waited for at all (wait=0): its own lock is free, so its verdict is kept.
        assert probe_once(cache, "ab99", lambda: True, wait=0) is True
        assert VerdictCache(cache).get("ab99") is True
