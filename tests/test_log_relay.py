"""A tenant process's output reaches the job's log bounded: the head in full, then each
process's last bytes after a line saying what was cut, then (over the hard cap) the line only."""

import subprocess
import sys

from dlsched.runtime.tenant_process import LogRelay


def printing(n_lines: int, tag: str):
    code = f"for i in range({n_lines}): print('{tag}', i)"
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)


def relay(path, n_lines, tag, **caps):
    proc = printing(n_lines, tag)
    r = LogRelay(proc.stdout, path, **caps)
    proc.wait()
    r.thread.join(timeout=30)
    assert not r.thread.is_alive()


def test_under_the_head_the_output_is_kept_whole(tmp_path):
    log = tmp_path / "job.log"
    relay(log, 100, "a", head=10_000, tail=100, hard=20_000)
    assert log.read_text() == "".join(f"a {i}\n" for i in range(100))


def test_a_burst_fills_the_head_to_its_last_byte(tmp_path):
    log = tmp_path / "job.log"
    proc = subprocess.Popen([sys.executable, "-c", "print('x' * 5000)"], stdout=subprocess.PIPE)
    proc.wait()  # the whole output waits in the pipe: one chunk larger than the head
    r = LogRelay(proc.stdout, log, head=1000, tail=100, hard=2000)
    r.thread.join(timeout=30)
    text = log.read_text()
    assert text.startswith("x" * 1000 + "\n[dlsched: 3901 bytes of this process's output cut")
    assert text.endswith("x" * 99 + "\n")


def test_past_the_head_each_process_keeps_its_tail_after_a_mark(tmp_path):
    log = tmp_path / "job.log"
    caps = dict(head=1000, tail=200, hard=1500)
    relay(log, 10_000, "a", **caps)  # about 68,890 bytes
    text = log.read_text()
    head, rest = text.split("\n[dlsched: ", 1)
    assert len(head) <= 1000 and head.startswith("a 0\na 1\n")
    cut, tail = rest.split("]\n", 1)
    full = "".join(f"a {i}\n" for i in range(10_000))
    assert cut == f"{len(full) - len(head) - 200} bytes of this process's output cut here: " + (
        "the log is over its limit"
    )
    assert tail == full[-200:]  # the last bytes, to the end
    # a second process of the same job (another worker, a restart): the head is full, so it
    # keeps its tail only; then the file is over the hard cap: the next ones write the mark only
    relay(log, 10_000, "b", **caps)
    assert log.read_text().endswith("".join(f"b {i}\n" for i in range(10_000))[-200:])
    relay(log, 30_000, "c", **caps)
    relay(log, 30_000, "d", **caps)
    text = log.read_text()
    assert len(text) <= 1500 + 300 + 2 * 100
    assert text.endswith("bytes of this process's output cut: the log is over its limit]\n")
    assert "d 29999" not in text  # the last process kept nothing past the mark
