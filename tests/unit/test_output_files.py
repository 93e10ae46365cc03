"""fragviz.base.files on real files of every kind: where an output goes (a file replaced whole, a FIFO, a device or
one of the process's own descriptors written in place, a link followed, a folder or a missing one refused in one
line) and what a small input may be (a regular file under its limit: a FIFO refused without waiting, /dev/zero
unread)."""
from __future__ import annotations

import os
import socket
import stat
import threading

import pytest

from fragviz.base.errors import FragvizError, InputError, OutputError
from fragviz.base.files import append_text, check_output, own_descriptor, read_small, write_output


def fifo_reader(path) -> tuple[threading.Thread, list[bytes]]:
    """A reader at the other end of the FIFO at `path`: what it read lands in the list."""
    got: list[bytes] = []

    def read() -> None:
        with open(path, "rb") as fh:
            got.append(fh.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, got


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text and len(text) < 300, text
    return text


# -- outputs ---------------------------------------------------------------------------------------------------------

def test_a_regular_file_is_replaced_whole_keeping_its_mode(tmp_path):
    path = tmp_path / "report.md"
    path.write_text("old and longer than the new text\n")
    os.chmod(path, 0o640)
    before = os.stat(path).st_ino
    assert write_output(str(path), "new\n") == str(path)
    assert path.read_text() == "new\n"
    assert os.stat(path).st_ino != before  # a new file renamed into place: a reader never sees half of it
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["report.md"]  # no temporary file left beside it


def test_a_new_file_is_made_as_the_umask_says(tmp_path):
    path = tmp_path / "new.json"
    old = os.umask(0o027)
    try:
        write_output(str(path), b"{}")
    finally:
        os.umask(old)
    assert path.read_bytes() == b"{}" and stat.S_IMODE(os.stat(path).st_mode) == 0o640


def test_a_symlink_is_followed_and_its_target_replaced(tmp_path):
    target = tmp_path / "real" / "out.xml"
    target.parent.mkdir()
    target.write_text("old")
    (tmp_path / "hop").symlink_to(target)
    link = tmp_path / "out.xml"
    link.symlink_to(tmp_path / "hop")  # a chain of two links
    write_output(str(link), "<new/>")
    assert link.is_symlink() and (tmp_path / "hop").is_symlink()
    assert target.read_text() == "<new/>"


def test_a_dangling_symlink_makes_its_target_where_its_folder_exists(tmp_path):
    link = tmp_path / "out.md"
    link.symlink_to("made.md")  # relative to the link's folder
    write_output(str(link), "text")
    assert link.is_symlink() and (tmp_path / "made.md").read_text() == "text"
    gone = tmp_path / "gone.md"
    gone.symlink_to(tmp_path / "missing" / "x.md")
    with pytest.raises(OutputError) as exc:
        write_output(str(gone), "text", "--markdown")
    assert one_line(exc).startswith(f"--markdown {gone}: the folder {tmp_path / 'missing'} (where the link points) "
                                    "does not exist")


def test_a_symlink_loop_is_one_line(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(OutputError) as exc:
        write_output(str(tmp_path / "a"), "x")
    assert "too many levels of symbolic links" in one_line(exc)


def test_a_fifo_is_written_in_place_to_its_reader(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    thread, got = fifo_reader(path)
    write_output(str(path), b"x" * 300_000)  # more than a pipe's buffer
    thread.join(10)
    assert got == [b"x" * 300_000] and stat.S_ISFIFO(os.stat(path).st_mode)


def test_a_character_device_is_written_in_place(tmp_path):
    write_output("/dev/null", "anything")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    write_output(str(link), "anything")
    assert link.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_full_device_is_one_line():
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with pytest.raises(OutputError) as exc:
        write_output("/dev/full", "x", "--markdown")
    assert one_line(exc).startswith("--markdown /dev/full: cannot be written (No space left on device)")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_the_process_own_descriptors_are_written_where_they_stand():
    read, write = os.pipe()
    try:
        assert own_descriptor(f"/dev/fd/{write}") == write
        assert own_descriptor(f"/proc/self/fd/{write}") == own_descriptor(f"/proc/{os.getpid()}/fd/{write}") == write
        assert own_descriptor("/dev/stdout") == 1 and own_descriptor("/dev/stderr") == 2
        assert own_descriptor(f"/proc/{os.getpid() + 1}/fd/1") is None and own_descriptor("/dev/null") is None
        write_output(f"/dev/fd/{write}", "through the pipe")
        assert os.read(read, 100) == b"through the pipe"
    finally:
        os.close(read)
        os.close(write)


def test_a_descriptor_that_is_not_open_is_one_line():
    read, write = os.pipe()
    os.close(read)
    os.close(write)
    with pytest.raises(OutputError) as exc:
        write_output(f"/dev/fd/{write}", "x", "--junit")
    assert one_line(exc).startswith(f"--junit /dev/fd/{write}: cannot be written (Bad file descriptor)")


@pytest.mark.parametrize("kind", ["directory", "missing folder", "socket", "file as folder"])
def test_what_cannot_be_written_is_refused_in_one_line_naming_the_option(tmp_path, kind):
    path = {"directory": tmp_path, "missing folder": tmp_path / "no" / "x.md", "socket": tmp_path / "sock",
            "file as folder": tmp_path / "file" / "x.md"}[kind]
    words = {"directory": "is a directory: give a file name",
             "missing folder": f"the folder {tmp_path / 'no'} does not exist: create it first",
             "socket": "is a socket: fragviz writes regular files, FIFOs and character devices",
             "file as folder": "cannot be written (Not a directory)"}[kind]
    server = None
    if kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
    if kind == "file as folder":
        (tmp_path / "file").write_text("")
    try:
        for call in (check_output, write_output):
            with pytest.raises(OutputError) as exc:
                call(str(path), *(["x"] if call is write_output else []), "--write-summary")
            assert one_line(exc) == f"--write-summary {path}: {words}"
            assert isinstance(exc.value, FragvizError) and exc.value.exit_code == 2
    finally:
        if server is not None:
            server.close()


def test_append_text_failure_is_one_line(tmp_path):
    with pytest.raises(OutputError) as exc:
        append_text(str(tmp_path), "x", "$GITHUB_STEP_SUMMARY")
    assert one_line(exc).startswith(f"$GITHUB_STEP_SUMMARY {tmp_path}: cannot be appended to (Is a directory)")


# -- small inputs ------------------------------------------------------------------------------------------------------

def test_a_small_regular_file_is_read_and_a_link_to_it_too(tmp_path):
    path = tmp_path / "s.json"
    path.write_bytes(b"{}")
    (tmp_path / "link.json").symlink_to(path)
    assert read_small(str(path), 2, "memory summary") == read_small(str(tmp_path / "link.json"), 2, "x") == b"{}"


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    path = tmp_path / "baseline.json"
    os.mkfifo(path)
    outcome: list = []

    def read() -> None:
        try:
            read_small(str(path), 1000, "memory summary")
        except InputError as exc:
            outcome.append(str(exc))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(10)
    assert outcome == [f"{path}: is a FIFO, not a memory summary (fragviz reads it from a regular file)"]


@pytest.mark.parametrize("kind", ["link to /dev/zero", "directory", "too large", "missing"])
def test_what_is_not_a_small_regular_file_is_refused_unread(tmp_path, kind):
    path = tmp_path / "baseline.json"
    if kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    elif kind == "too large":
        path.write_bytes(b" " * 1001)
    words = {"link to /dev/zero": "is a character device, not a memory summary (fragviz reads it from a regular file)",
             "directory": "is a directory, not a memory summary",
             "too large": "1,001 bytes is too large for a memory summary (at most 1,000)",
             "missing": "cannot be read (No such file or directory)"}[kind]
    with pytest.raises(InputError) as exc:
        read_small(str(path), 1000, "memory summary")
    assert one_line(exc) == f"{path}: {words}"
