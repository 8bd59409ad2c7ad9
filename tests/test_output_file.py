"""`-o FILE` never destroys what is at the path: `kgen render -o /dev/null` as root once
turned the machine's /dev/null into a regular file.

Everything happens under tmp_path: the device is a private node made with mknod, read-only and full
filesystems are private mounts in a private mount namespace (unshare). Most tests run the real `kgen`
process; the library function (kgen.resources.write_file) is also tested directly.
"""

import os
import shutil
import stat
import subprocess
import threading

import pytest
from click.testing import CliRunner

from kgen.cli import cli
from kgen.resources import write_file

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mknod, chown, mount namespaces)")


def run(kgen_cmd, *args, umask=None, timeout=60, **kw):
    preexec = (lambda: os.umask(umask)) if umask is not None else None
    return subprocess.run([*kgen_cmd, *args], capture_output=True, timeout=timeout, preexec_fn=preexec, **kw)


@pytest.fixture(scope="module")
def rendered(request):
    """What `kgen render --preset 4x8` prints (the content every -o test expects)."""
    return CliRunner().invoke(cli, ["render", "--preset", "4x8"], catch_exceptions=False).stdout_bytes


def one_line_error(done, *needles):
    err = done.stderr.decode()
    assert done.returncode == 2, (done.returncode, err)
    assert done.stdout == b""
    assert err.startswith("kgen: error: --output-file: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# -- devices and FIFOs: opened and written, never replaced -----------------------------------------


@ROOT_ONLY
def test_a_character_device_stays_a_character_device(kgen_cmd, tmp_path):
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a private /dev/null
    before = os.lstat(null)
    for args in (["render", "--preset", "64x8"], ["lint", "-"], ["entrypoint"]):
        stdin = b"" if args[0] != "lint" else run(kgen_cmd, "render").stdout
        done = run(kgen_cmd, *args, "--output-file", str(null), input=stdin)
        assert done.returncode == 0, done.stderr
        assert done.stdout == b""
        after = os.lstat(null)
        assert stat.S_ISCHR(after.st_mode), f"{args}: {null} is no longer a character device"
        assert (after.st_rdev, after.st_ino, after.st_mode) == (before.st_rdev, before.st_ino, before.st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]


def test_a_fifo_is_written_not_replaced(kgen_cmd, tmp_path, rendered):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []

    def reader():
        with open(fifo, "rb") as fh:
            got.append(fh.read())

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        done = run(kgen_cmd, "render", "--preset", "4x8", "--output-file", str(fifo), timeout=30)
    finally:
        t.join(timeout=30)
        if t.is_alive():  # kgen never opened the FIFO: unblock the reader, then fail
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            t.join(timeout=5)
    assert done.returncode == 0, done.stderr
    assert got == [rendered]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


# -- symlinks: the link stays, its target gets the content -------------------------------------------


def test_a_symlink_stays_a_symlink_and_its_target_gets_the_content(kgen_cmd, tmp_path, rendered):
    target = tmp_path / "real.yaml"
    target.write_text("old\n")
    target.chmod(0o640)
    link = tmp_path / "link.yaml"
    link.symlink_to("real.yaml")
    done = run(kgen_cmd, "render", "--preset", "4x8", "--output-file", str(link))
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == "real.yaml"
    assert target.read_bytes() == rendered
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert leftovers(tmp_path) == []


def test_a_symlink_chain_across_folders_writes_the_last_target(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    final = tmp_path / "b" / "final.yaml"
    final.write_text("old\n")
    (tmp_path / "b" / "mid.yaml").symlink_to("final.yaml")  # relative to b/
    (tmp_path / "a" / "first.yaml").symlink_to("../b/mid.yaml")  # relative to a/
    write_file(tmp_path / "a" / "first.yaml", b"new\n")
    assert final.read_text() == "new\n"
    assert (tmp_path / "a" / "first.yaml").is_symlink() and (tmp_path / "b" / "mid.yaml").is_symlink()
    assert leftovers(tmp_path / "a") == leftovers(tmp_path / "b") == []


def test_a_dangling_symlink_gets_its_target_created(kgen_cmd, tmp_path, rendered):
    """As the shell's `> link` does: the link names the file to write."""
    (tmp_path / "out").mkdir()
    link = tmp_path / "link.yaml"
    link.symlink_to("out/new.yaml")
    done = run(kgen_cmd, "render", "--preset", "4x8", "--output-file", str(link), umask=0o022)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink()
    assert (tmp_path / "out" / "new.yaml").read_bytes() == rendered
    assert stat.S_IMODE((tmp_path / "out" / "new.yaml").stat().st_mode) == 0o644


def test_a_dangling_symlink_into_a_missing_folder_is_one_line(kgen_cmd, tmp_path):
    link = tmp_path / "link.yaml"
    link.symlink_to("nowhere/new.yaml")
    done = run(kgen_cmd, "render", "--output-file", str(link))
    one_line_error(done, str(link), "No such file or directory", "create the folder first")
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()


def test_a_symlink_loop_is_one_line(kgen_cmd, tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    done = run(kgen_cmd, "render", "--output-file", str(tmp_path / "a"))
    one_line_error(done, "symbolic links")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_a_file_descriptor_link_is_the_open_file_not_a_path_to_replace(kgen_cmd, tmp_path, rendered):
    """`-o /dev/stdout` (here: /proc/self/fd/1, and a private link to it) writes to the open stdout,
    truncating a regular file as the shell's `>` does; the link is never replaced."""
    out = tmp_path / "stdout.yaml"
    out.write_bytes(b"x" * 200_000)  # longer than the manifest: must be truncated
    link = tmp_path / "my-stdout"
    link.symlink_to("/proc/self/fd/1")
    with open(out, "r+b") as fh:  # stdout opened without truncating
        done = subprocess.run(
            [*kgen_cmd, "render", "--preset", "4x8", "--output-file", "/proc/self/fd/1"], stdout=fh, timeout=60
        )
    assert done.returncode == 0 and out.read_bytes() == rendered
    piped = run(kgen_cmd, "render", "--preset", "4x8", "--output-file", str(link))  # stdout is a pipe
    assert piped.returncode == 0 and piped.stdout == rendered
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my-stdout", "stdout.yaml"]


# -- modes, owners, umask ---------------------------------------------------------------------------


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664), (0o077, 0o600)])
def test_a_new_file_gets_0666_minus_the_umask(kgen_cmd, tmp_path, umask, mode):
    out = tmp_path / "new.yaml"
    done = run(kgen_cmd, "render", "--output-file", str(out), umask=umask)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(out.stat().st_mode) == mode


@pytest.mark.parametrize("mode", [0o600, 0o644, 0o755, 0o664])
def test_an_existing_file_keeps_its_mode(kgen_cmd, tmp_path, mode, rendered):
    out = tmp_path / "m.yaml"
    out.write_text("old\n")
    out.chmod(mode)
    done = run(kgen_cmd, "render", "--preset", "4x8", "--output-file", str(out), umask=0o077)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == rendered
    assert stat.S_IMODE(out.stat().st_mode) == mode
    assert leftovers(tmp_path) == []


@ROOT_ONLY
def test_an_existing_file_keeps_its_owner_when_root_writes_it(tmp_path):
    out = tmp_path / "m.yaml"
    out.write_text("old\n")
    os.chown(out, 1234, 5678)
    out.chmod(0o640)
    write_file(out, b"new\n", durable=True)
    st = out.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1234, 5678, 0o640)
    assert out.read_text() == "new\n"


# -- stdout, folders, errors ------------------------------------------------------------------------


def test_dash_is_stdout(kgen_cmd, tmp_path, rendered):
    done = run(kgen_cmd, "render", "--preset", "4x8", "--output-file", "-", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == rendered
    assert list(tmp_path.iterdir()) == []  # no file named "-"


def test_a_folder_is_one_line_and_untouched(kgen_cmd, tmp_path):
    folder = tmp_path / "deploy"
    folder.mkdir()
    (folder / "keep.yaml").write_text("x: 1\n")
    for target in (str(folder), str(folder) + "/"):
        done = run(kgen_cmd, "render", "--output-file", target)
        one_line_error(done, "Is a directory", "name a file")
    assert sorted(p.name for p in folder.iterdir()) == ["keep.yaml"]


def test_a_render_error_writes_nothing(kgen_cmd, tmp_path):
    out = tmp_path / "m.yaml"
    out.write_text("previous\n")
    done = run(kgen_cmd, "render", "--nodes", "0", "--output-file", str(out))
    assert done.returncode == 2 and out.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.yaml"]


def _in_mount_namespace(kgen_cmd, setup, *args):
    """Run kgen in a private mount namespace after the shell commands in setup (mounts under tmp_path)."""
    script = " && ".join(setup) + ' && exec "$@"'
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *kgen_cmd, *args]
    return subprocess.run(cmd, capture_output=True, timeout=60)


needs_unshare = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and util-linux unshare"
)


@needs_unshare
def test_a_read_only_folder_is_one_line_and_the_file_is_untouched(kgen_cmd, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "m.yaml").write_text("previous\n")
    setup = [f"mount --bind {ro} {ro}", f"mount -o remount,bind,ro {ro}"]
    for name in ("m.yaml", "new.yaml"):
        done = _in_mount_namespace(kgen_cmd, setup, "render", "--output-file", str(ro / name))
        one_line_error(done, "Read-only file system", "choose a writable location")
    assert sorted(p.name for p in ro.iterdir()) == ["m.yaml"]
    assert (ro / "m.yaml").read_text() == "previous\n"


@needs_unshare
def test_a_full_disk_leaves_the_old_file_and_no_temp_file(kgen_cmd, tmp_path):
    """All or nothing: the 64x8 JSON (~90 KB) does not fit a 16 KB filesystem; what is left is looked at
    from inside the namespace (the tmpfs goes away with it)."""
    small = tmp_path / "small"
    small.mkdir()
    script = (
        f"mount -t tmpfs -o size=16k tmpfs {small} && printf 'previous\\n' > {small}/m.json && "
        f'{{ "$@"; echo "rc=$?"; cat {small}/m.json; ls -A {small}; }}'
    )
    args = ["render", "--preset", "64x8", "--format", "json", "--output-file", f"{small}/m.json"]
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *kgen_cmd, *args]
    done = subprocess.run(cmd, capture_output=True, timeout=60)
    assert done.stdout.decode() == "rc=2\nprevious\nm.json\n", (done.stdout, done.stderr)
    one_line_error(subprocess.CompletedProcess(cmd, 2, b"", done.stderr), "No space left on device", "free some space")


def test_the_library_writer_is_all_or_nothing_on_a_failing_write(tmp_path):
    """An exception during the write leaves the old file and no temp file (data that is not bytes)."""
    out = tmp_path / "m.yaml"
    out.write_text("previous\n")
    with pytest.raises(TypeError):
        write_file(out, "not bytes")  # type: ignore[arg-type]
    assert out.read_text() == "previous\n"
    assert leftovers(tmp_path) == []


needs_setpriv = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and util-linux setpriv"
)
WITHOUT_DAC_OVERRIDE = ["setpriv", "--inh-caps=-dac_override", "--bounding-set=-dac_override"]


@needs_setpriv
def test_a_write_protected_file_is_refused_like_the_shells_redirect(kgen_cmd, tmp_path, rendered):
    """A 0444 file in a writable folder: the shell's `>` refuses it unless the caller has CAP_DAC_OVERRIDE,
    although a rename would get past the mode. kgen refuses the same way, and still writes
    it for a caller with the capability (root as usual), as `>` does."""
    out = tmp_path / "m.yaml"
    out.write_text("previous\n")
    out.chmod(0o444)
    shell = subprocess.run([*WITHOUT_DAC_OVERRIDE, "sh", "-c", f"echo x > {out}"], capture_output=True, timeout=60)
    assert shell.returncode != 0 and b"Permission denied" in shell.stderr  # the behaviour to imitate
    done = run([*WITHOUT_DAC_OVERRIDE, *kgen_cmd], "render", "--preset", "4x8", "--output-file", str(out))
    one_line_error(done, f"cannot write {out}: Permission denied")
    assert out.read_text() == "previous\n" and leftovers(tmp_path) == []
    done = run(kgen_cmd, "render", "--preset", "4x8", "--output-file", str(out))  # root with the capability
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == rendered and stat.S_IMODE(out.stat().st_mode) == 0o444
