"""--hosts and --hostfile (pure): rank order, hostile input refused with the option and the fix."""

import pytest

from kgen.baremetal.hosts import MAX_HOSTFILE_BYTES, parse_hostfile, parse_hosts, read_hostfile
from kgen.errors import UsageError


def test_hosts_in_rank_order():
    assert parse_hosts("gpu1,user@gpu2, ssh://me@gpu3:2222").hosts == ("gpu1", "user@gpu2", "ssh://me@gpu3:2222")


@pytest.mark.parametrize(
    "value,words",
    [
        ("a,,b", "empty host name"),
        ("a,", "empty host name"),
        ("-oProxyCommand=sh", "starts with"),
        ("a b", "not an ssh destination"),
        ("a;rm -rf ~", "not an ssh destination"),
        ("$(reboot)", "not an ssh destination"),
        ("a\nb", "not an ssh destination"),
        ("x" * 300, "not an ssh destination"),
    ],
)
def test_bad_hosts_name_the_option(value, words):
    with pytest.raises(UsageError) as err:
        parse_hosts(value)
    assert err.value.option == "--hosts" and words in str(err.value)


def test_hostfile_comments_slots_and_errors():
    hl = parse_hostfile("# nodes\ngpu1 slots=8\n\n  gpu2 slots=8  # second\n", "h.txt")
    assert hl.hosts == ("gpu1", "gpu2") and hl.slots == 8
    with pytest.raises(UsageError, match="different slots"):
        parse_hostfile("a slots=8\nb slots=4\n", "h.txt")
    with pytest.raises(UsageError, match=r"h.txt:2.*unexpected \"max=3\""):
        parse_hostfile("a\nb max=3\n", "h.txt")
    with pytest.raises(UsageError, match="no hosts"):
        parse_hostfile("# nothing\n\n", "h.txt")


def test_hostfile_hostile_files(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"a\n" * (MAX_HOSTFILE_BYTES // 2 + 10))
    with pytest.raises(UsageError, match="larger than"):
        read_hostfile(str(big))
    with pytest.raises(UsageError, match="larger than"):
        read_hostfile("/dev/zero")  # an endless stream is read only up to the bound
    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UsageError, match="not UTF-8"):
        read_hostfile(str(binary))
    with pytest.raises(UsageError, match="cannot read"):
        read_hostfile(str(tmp_path / "missing"))
