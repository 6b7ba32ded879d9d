"""The nccl-tests parser against the 20 real logs in tests/fixtures/nccl-tests/ and edge cases.

Every expected number below was read off the fixture by hand (first and last row, row count, summary
lines, device list); SOURCES.md in the fixture folder says where each log comes from.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gpufleet.errors import LogParseError
from gpufleet.validate.models import Half
from gpufleet.validate.nccl_log import canonical_transport, parse_log, parse_text, strip_prefix

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl-tests"
DATA = Path(__file__).resolve().parent / "data"

# One line per fixture (by its number): rows, collective, where it came from, ranks, where they came
# from, hosts, the printed average busbw, out-of-bounds count, sum of #wrong, transport ('-' for None).
SUMMARIES = """
01 31  all_reduce      row_shape     2    devices    2  1.15327   0  0        OFI
02 13  all_reduce      row_shape     32   row_shape  0  113.289   0  -        -
03 31  all_gather      command_line  12   devices    1  30.2993   4  -        -
04 31  broadcast       command_line  12   devices    1  41.2456   0  -        -
05 5   sendrecv        test_name     2    devices    2  42.9182   0  0        -
06 31  reduce_scatter  test_name     8    devices    1  110.971   0  0        -
07 28  all_reduce      test_name     16   devices    4  -         -  3935945  -
08 11  all_gather      row_shape     16   row_shape  0  120.346   0  -        -
09 29  gather          row_shape     16   row_shape  0  -         -  0        -
10 31  all_reduce      row_shape     -    -          0  0.733914  0  0        Socket
11 1   all_reduce      row_shape     16   row_shape  0  53.2202   -  0        -
12 11  all_reduce      row_shape     2    nranks     0  2.61937   0  0        IBext
13 24  all_gather      row_shape     16   devices    2  59.3638   0  0        -
14 24  all_reduce      command_line  2    devices    2  15.5188   0  0        -
15 32  all_reduce      row_shape     16   devices    2  92.3318   0  0        -
16 2   alltoall        test_name     8    devices    1  236.187   0  0        -
17 2   all_reduce      test_name     128  devices    2  300.755   0  0        -
18 2   all_gather      row_shape     8    row_shape  0  196.15    0  0        -
19 85  gather          test_name     2    devices    2  -         -  0        IB
20 0   alltoall        test_name     16   devices    2  -         -  -        -
"""


def _value(token: str) -> object:
    if token == "-":
        return None
    for kind in (int, float):
        try:
            return kind(token)
        except ValueError:
            pass
    return token.replace("_", " ") if token in ("row_shape", "command_line", "test_name") else token


LOGS = {path.name[:2]: path.name for path in FIXTURES.glob("*.log")}
EXPECTED = {
    LOGS[line.split()[0]]: tuple(_value(token) for token in line.split()[1:])
    for line in SUMMARIES.strip().splitlines()
}


def test_every_fixture_has_expectations():
    assert sorted(EXPECTED) == sorted(LOGS.values()) and len(LOGS) == 20


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_summary(name):
    tests = parse_log(FIXTURES / name)
    assert len(tests) == 1, [t.label for t in tests]
    test = tests[0]
    got = (
        len(test.rows),
        test.collective,
        test.collective_source,
        test.ranks,
        test.ranks_source,
        len(test.hosts),
        test.avg_busbw,
        test.out_of_bounds,
        test.wrong_total,
        test.transport,
    )
    assert got == EXPECTED[name], test.to_json()


def _half(half: Half | None) -> tuple:
    assert half is not None
    return (half.time_us, half.algbw, half.busbw, half.wrong if half.error is None else half.error)


# The first and last row of each fixture as the log prints them: size count type redop root, then
# time algbw busbw #wrong (or the legacy error) for out-of-place and in-place; '-' for an absent column
# and for N/A.
ROWS = """
01 first 0           0          float sum  -1 | 6.36    0.0    0.0    0      | 6.40    0.0    0.0    0
01 last  1073741824  268435456  float sum  -1 | 344981  3.11   3.11   0      | 344454  3.12   3.12   0
02 first 1048576     262144     float sum  -  | 135.3   7.75   15.02  7e-07  | 132.7   7.90   15.31  7e-07
02 last  4294967296  1073741824 float sum  -  | 43557   98.61  191.05 1e-06  | 43440   98.87  191.56 1e-06
03 first 0           0          float -    -  | 57.30   0.0    0.0    0e+00  | 57.09   0.0    0.0    0e+00
03 last  8589934560  178956970  float -    -  | 106773  73.75  73.75  1e+00  | 70089   112.34 112.34 1e+00
04 first 8           2          float -    0  | 59.75   0.0    0.0    0e+00  | 59.96   0.0    0.0    0e+00
04 last  8589934592  2147483648 float -    0  | 70321   122.15 122.15 0e+00  | 70368   122.07 122.07 0e+00
05 first 33554432    4194304    double sum -1 | 838.43  40.02  40.02  0      | 787.24  42.62  42.62  -
05 last  536870912   67108864   double sum -1 | 12322.0 43.57  43.57  0      | 12299.3 43.65  43.65  -
06 first 0           0          float sum  -1 | 0.91    0.0    0.0    0      | 0.96    0.0    0.0    0
06 last  8589934592  268435456  float sum  -1 | 20731.4 414.34 362.55 0      | 20749.9 413.97 362.23 0
07 first 1           1          int8  sum  -1 | 24.41   0.0    0.0    0      | 21.26   0.0    0.0    0
07 last  134217728   134217728  int8  sum  -1 | 2800.93 47.92  89.85  0      | 3023.61 44.39  83.23  0
08 first 8388608     131072     float none -1 | 350.9   23.91  22.41  -      | 345.0   24.31  22.79  -
08 last  8589934592  134217728  float none -1 | 42954   199.98 187.48 -      | 43188   198.90 186.47 -
09 first 0           0          float none 0  | 0.15    0.0    0.0    0      | 0.14    0.0    0.0    0
09 last  2147483648  33554432   float none 0  | 25421   84.48  79.20  0      | 25283   84.94  79.63  0
10 first 0           0          float sum  -1 | 3.91    0.0    0.0    0      | 3.88    0.0    0.0    0
10 last  1073741824  268435456  float sum  -1 | 536774  2.00   2.00   0      | 541545  1.98   1.98   0
11 first 2147483648  536870912  float sum  -1 | 9175.1  234.05 438.85 0      | 9166.2  234.28 439.28 0
11 last  2147483648  536870912  float sum  -1 | 9175.1  234.05 438.85 0      | 9166.2  234.28 439.28 0
12 first 2097152     524288     float sum  -1 | 880.2   2.38   2.38   0      | 877.1   2.39   2.39   0
12 last  2147483648  536870912  float sum  -1 | 756857  2.84   2.84   0      | 757311  2.84   2.84   0
13 first 1024        16         float none -1 | 280.4   0.0    0.0    0      | 233.9   0.0    0.0    0
13 last  8589934592  134217728  float none -1 | 30970   277.36 260.03 0      | 31063   276.53 259.25 0
14 first 1024        256        float sum  -1 | 35.59   0.03   0.03   0      | 30.61   0.03   0.03   0
14 last  8589934592  2147483648 float sum  -1 | 269368  31.89  31.89  0      | 269407  31.88  31.88  0
15 first 8           2          float sum  -1 | 256.5   0.0    0.0    0      | 254.7   0.0    0.0    0
15 last  17179869184 4294967296 float sum  -1 | 90115   190.64 357.46 0      | 90127   190.62 357.41 0
16 first 8589934592  268435456  float none -1 | 20837   412.23 360.71 0      | 20817   412.64 361.06 -
16 last  17179869184 536870912  float none -1 | 41593   413.05 361.41 0      | 41618   412.80 361.20 -
17 first 8589934592  2147483648 float sum  -1 | 24050   357.16 708.75 0      | 24006   357.83 710.06 0
17 last  17179869184 4294967296 float sum  -1 | 46170   372.10 738.39 0      | 46070   372.91 739.99 0
18 first 8589934592  2147483648 float none -1 | 11426   751.78 657.81 0      | 11418   752.324 658.30 -
18 last  17179869184 536870912  float none -1 | 22698   756.88 662.27 0      | 22741   755.47 661.03 -
19 first 134217728   16777216   float none 0  | 3324.7  40.37  20.19  0      | 3003.4  44.69  22.34  0
19 last  11408506880 1426063360 float none 0  | 522721  21.83  10.91  0      | 524916  21.73  10.87  0
"""


def _row_expectations() -> list[tuple[str, str, tuple, tuple, tuple]]:
    cases = []
    for line in ROWS.strip().splitlines():
        head, oop, ip = line.split("|")
        number, which, size, count, kind, redop, root = head.split()
        preamble = (int(size), int(count), kind, _value(redop), _value(root))
        halves = tuple(tuple(_value(token) for token in half.split()) for half in (oop, ip))
        cases.append((LOGS[number], which, preamble, halves[0], halves[1]))
    return cases


@pytest.mark.parametrize(("name", "which", "preamble", "oop", "ip"), _row_expectations())
def test_fixture_first_and_last_rows(name, which, preamble, oop, ip):
    test = parse_log(FIXTURES / name)[0]
    row = test.rows[0] if which == "first" else test.rows[-1]
    assert (row.size, row.count, row.type, row.redop, row.root) == preamble
    assert _half(row.oop) == pytest.approx(oop), row
    assert _half(row.ip) == pytest.approx(ip), row


def test_01_mpi_prefix_info_lines_and_versions():
    test = parse_log(FIXTURES / "01-eks-g4dn-t4-efa-ofi-allreduce.log")[0]
    assert test.hosts == ["test-nccl-efa-worker-0", "test-nccl-efa-worker-1"]
    assert test.nccl_version == "2.12.7"
    assert test.net_plugin == "aws-ofi-nccl 1.5.0aws"
    # 'Using network AWS Libfabric' twice, 'via NET/AWS Libfabric/0' on 8 channel lines
    assert test.transports == {"OFI": 10}
    assert "all_reduce or sendrecv" in test.collective_note
    assert test.rows[0].line == 58 and test.rows[-1].line == 88
    assert not test.truncated and not test.failures


def test_02_legacy_error_column_is_not_a_wrong_count():
    test = parse_log(FIXTURES / "02-deepops-dgxa100-legacy-error-column.log")[0]
    assert test.legacy_error_column
    assert all(row.oop.wrong is None and row.oop.error is not None for row in test.rows)
    assert test.wrong_total is None and test.data_checked
    # busbw/algbw = 191.05/98.61 = 1.937 = 2(n-1)/n -> n = 32 (4 x DGX A100, as the prose says)
    assert test.ranks == 32


def test_03_oob_failed_and_echoed_command():
    test = parse_log(FIXTURES / "03-dgx2-v100-allgather-oob-failed-legacy.log")[0]
    assert test.out_of_bounds == 4
    assert test.test_name == "all_gather_perf"
    assert test.hosts == ["seville"]
    assert [row.oop.error for row in test.rows[-2:]] == [1.0, 1.0]
    assert test.rows[3].size == 48  # not a power of two: 12 ranks x 4 bytes


def test_05_versions_from_nccl_tests_header():
    test = parse_log(FIXTURES / "05-h100-sendrecv-2node-inplace-na.log")[0]
    assert test.tests_version == "nccl-tests 2.17.8"
    assert test.nccl_version == "2.29.2"  # nccl-library=22902
    assert test.concluded
    assert [row.ip.wrong for row in test.rows] == [None] * 5
    assert [row.oop.wrong for row in test.rows] == [0] * 5


def test_06_zero_size_rows_and_single_process_ranks():
    test = parse_log(FIXTURES / "06-h100x8-reduce-scatter-zero-size-rows.log")[0]
    assert [row.size for row in test.rows[:5]] == [0, 0, 0, 0, 128]
    assert test.config["nGpus"] == 8
    assert test.nccl_version == "2.26.2"


def test_07_wrong_counts_and_missing_footer():
    test = parse_log(FIXTURES / "07-gh200-olivia-int8-wrong-nofooter.log")[0]
    wrong = {row.size: (row.oop.wrong, row.ip.wrong) for row in test.rows if row.oop.wrong or row.ip.wrong}
    assert wrong == {
        2097152: (18134, 9609),
        4194304: (96817, 124342),
        8388608: (763876, 530181),
        16777216: (404221, 103664),
        33554432: (951005, 820604),
        67108864: (113492, 0),
    }
    assert test.truncated and test.out_of_bounds is None and test.avg_busbw is None
    assert test.hosts == ["gpu-1-43", "gpu-1-47", "gpu-1-49", "gpu-1-51"]


def test_08_slurm_label_prefix_and_na_everywhere():
    test = parse_log(FIXTURES / "08-gcp-a3mega-allgather-srun-prefix.log")[0]
    assert test.wrong_total is None and not test.data_checked
    assert "all_gather or alltoall" in test.collective_note


def test_09_unlabelled_slurm_prefix_scatter_shape():
    test = parse_log(FIXTURES / "09-aws-efa-scatter-srun-label-nofooter.log")[0]
    assert test.rows[-1].size == 2147483648 and test.truncated
    assert "gather or scatter" in test.collective_note


def test_10_socket_transport_and_elisions():
    test = parse_log(FIXTURES / "10-eks-socket-transport-elided.log")[0]
    assert test.transports == {"Socket": 1}
    assert any("left out" in note for note in test.notes)


def test_12_ibext_over_roce_with_nranks_only():
    test = parse_log(FIXTURES / "12-roce-ibext-2rank-koordinator.log")[0]
    # 'NET/IB : Using [0]mlx5_2:1/RoCE' is weak evidence; 'Using network IBext_v8' (twice) decides
    assert test.transports == {"IBext": 2}
    assert test.net_plugin == "IBext_v8"
    assert test.nccl_version == "2.21.5"
    assert test.hosts == []


def test_15_rccl_versions_and_old_device_lines():
    test = parse_log(FIXTURES / "15-mi300x-rccl-2node-allreduce.log")[0]
    assert test.tests_version == "rccl-tests develop:448c4c7"
    assert test.nccl_version == "rccl 2.22.3"
    assert test.hosts == ["gpu-53", "gpu-56"]
    assert test.collective_note == "inferred from the row shape (count/size ratio 1)"


def test_16_hand_edited_indentation():
    test = parse_log(FIXTURES / "16-mi355x-rccl-alltoall-hand-edited.log")[0]
    assert [row.size for row in test.rows] == [8589934592, 17179869184]
    assert test.concluded


def test_17_elided_device_list_and_table():
    test = parse_log(FIXTURES / "17-gb300-128rank-allreduce-elided.log")[0]
    assert test.devices_elided and test.elided
    assert test.hosts == ["GPU-5705", "GPU-391"]  # only the hosts shown: the list is elided
    assert test.nccl_version == "2.28.7"


def test_18_reformatted_rows_and_inconsistent_count():
    test = parse_log(FIXTURES / "18-gb200-alltoall-reformatted.log")[0]
    assert test.rows[0].ip.algbw == 752.324
    assert any("disagree" in note for note in test.notes)


def test_19_interleaved_info_lines_and_truncation():
    test = parse_log(FIXTURES / "19-a100-gather-ib-info-interleaved-truncated.log")[0]
    assert test.transports["IB"] >= 4
    assert test.nccl_version == "2.16.5"
    assert test.truncated
    assert test.config["step"] == 134217728 and test.config["step_unit"] == "bytes"
    assert any("12703978837" in note for note in test.notes)
    assert test.rows[0].line == 87 and test.rows[-1].line == 171


def test_20_row_broken_by_cuda_failure():
    test = parse_log(FIXTURES / "20-h800-alltoall-cuda-failure-midrow.log")[0]
    assert test.rows == []
    assert test.failures[0].startswith("line 27: the row for 2097152 B broke off: node0: Test CUDA failure")
    assert len(test.failures) == 7
    assert test.tests_version == "nccl-tests 2.17.6"


# ---- edge cases -----------------------------------------------------------------------------------

HEADER = (
    "# nThread 1 nGpus 1 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
    "validation: 1 graph: 0\n"
    "#\n"
    "#                                            out-of-place                       in-place\n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
    "            (us)  (GB/s)  (GB/s)\n"
)
ROW = (
    "     {size:>7}  {count:>12}     float     sum      -1    10.00    0.00    0.00      {w}"
    "    10.00    0.00    0.00      0\n"
)
FOOTER = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.5\n#\n"


def _table(sizes=(8, 16, 32), wrong="0") -> str:
    return HEADER + "".join(ROW.format(size=s, count=s // 4, w=wrong) for s in sizes) + FOOTER


def test_empty_input_is_an_error_naming_the_file():
    with pytest.raises(LogParseError, match=r"empty.log: line 1: the file is empty"):
        parse_text("", name="empty.log")


def test_no_table_is_an_error_with_the_last_line():
    with pytest.raises(LogParseError, match=r"x.log: line 3 \(end of file\): no nccl-tests result table"):
        parse_text("hello\nNCCL version 2.20.1\nbye\n", name="x.log")


def test_bad_row_in_the_middle_names_its_line():
    lines = _table().splitlines()
    lines[6] = lines[6].replace(" 0.00", " zero", 1)
    expected = r"bad.log: line 7: table row not understood: column 'algbw' is 'zero'"
    with pytest.raises(LogParseError, match=expected):
        parse_text("\n".join(lines) + "\n", name="bad.log")


def test_row_with_too_many_numbers_does_not_match_the_header():
    lines = _table().splitlines()
    lines[5] += "    1.00"
    with pytest.raises(LogParseError, match=r"line 6: .*does not match the header"):
        parse_text("\n".join(lines) + "\n" + ROW.format(size=64, count=16, w="0"), name="t")


def test_last_row_cut_short_is_truncation_not_an_error():
    cut = "          16             4     float     sum      -1    10.0"
    text = HEADER + ROW.format(size=8, count=2, w="0") + cut
    test = parse_text(text)[0]
    assert len(test.rows) == 1 and test.truncated
    assert any("cut short" in note for note in test.notes)


def test_bad_row_followed_by_summary_is_an_error():
    text = HEADER + "          16             4     float     sum      -1    10.0\n" + FOOTER
    with pytest.raises(LogParseError, match="line 6: table row not understood"):
        parse_text(text, name="t")


def test_several_tests_in_one_log():
    old_style = (FIXTURES / "02-deepops-dgxa100-legacy-error-column.log").read_text()
    new_style = (FIXTURES / "05-h100-sendrecv-2node-inplace-na.log").read_text()
    third = (FIXTURES / "06-h100x8-reduce-scatter-zero-size-rows.log").read_text()
    tests = parse_text(old_style + new_style + third + _table())
    assert [len(t.rows) for t in tests] == [13, 5, 31, 3]
    assert [t.collective for t in tests] == ["all_reduce", "sendrecv", "reduce_scatter", "all_reduce"]
    assert tests[1].start_line == 21 and tests[2].start_line == 42


def test_rows_after_a_summary_without_a_new_header_start_a_new_test():
    text = _table() + ROW.format(size=8, count=2, w="0") + FOOTER
    tests = parse_text(text)
    assert [len(t.rows) for t in tests] == [3, 1]


def test_wrong_in_g_notation_and_rccl_asterisk():
    rows = ROW.format(size=8, count=2, w="1.23457e+06") + ROW.format(size=16, count=4, w="12*")
    text = HEADER + rows + FOOTER
    test = parse_text(text)[0]
    assert [row.oop.wrong for row in test.rows] == [1234570, 12]


def test_crlf_line_endings_and_blank_lines_before():
    text = "\n\n" + _table().replace("\n", "\r\n")
    test = parse_log(io.StringIO(text, newline=""))[0]
    assert len(test.rows) == 3 and test.start_line == 3


def test_mixed_transports_are_all_reported():
    info = (
        "a:1:1 [0] NCCL INFO Using network IB\n"
        "b:2:2 [0] NCCL INFO Using network IB\n"
        "c:3:3 [0] NCCL INFO Using network Socket\n"
    )
    test = parse_text(info + _table())[0]
    assert test.transports == {"IB": 2, "Socket": 1}
    assert test.transport == "IB+Socket"


def test_nccl_warnings_are_kept_as_notes():
    warn = "[1,3]<stdout>:n3:9:9 [3] NCCL WARN NET/IB : Got completion from peer 10.0.0.4 with error 12\n"
    test = parse_text(warn * 7 + _table())[0]
    notes = [note for note in test.notes if "NCCL WARN" in note]
    assert len(notes) == 5 and notes[0].startswith("line 1: n3:9:9 [3] NCCL WARN NET/IB : Got completion")


def test_per_iteration_header_columns_are_skipped():
    header = (
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min"
        "    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%\n"
    )
    row = (
        "           8             2     float     sum      -1    10.00    0.00    0.00       0     9.00"
        "    11.0     11.0     1.00    10.50    0.00    0.00       0     9.00    11.0     11.0     1.00\n"
    )
    test = parse_text(header + row + FOOTER)[0]
    assert _half(test.rows[0].oop) == (10.0, 0.0, 0.0, 0)
    assert _half(test.rows[0].ip) == (10.5, 0.0, 0.0, 0)


def test_rows_without_a_header_are_guessed_and_said_so():
    text = "".join(ROW.format(size=s, count=s // 4, w="0") for s in (8, 16)) + FOOTER
    test = parse_text(text)[0]
    assert len(test.rows) == 2 and any("guessed" in note for note in test.notes)


def test_unreadable_header_is_an_error():
    with pytest.raises(LogParseError, match="line 1: table header not understood"):
        parse_text("#       size         count      type   speed\n")


def test_missing_file():
    with pytest.raises(LogParseError, match="no such file"):
        parse_log(Path("/nonexistent/nccl.log"))


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[1,0]<stdout>:#  Rank  0", "#  Rank  0"),
        ("[1,12]<stderr>: x", "x"),
        (" 0: #  size", "#  size"),
        ("12: 1024 256", "1024 256"),
        ("3: [1,3]<stdout>:# Avg", "# Avg"),
        ("     1024           256     float", "     1024           256     float"),
        ("pod-vf07:15718:15718 [0] NCCL INFO", "pod-vf07:15718:15718 [0] NCCL INFO"),
    ],
)
def test_strip_prefix(line, expected):
    assert strip_prefix(line) == expected


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("AWS Libfabric", "OFI"),
        ("Libfabric", "OFI"),
        ("IB", "IB"),
        ("IBext_v8", "IBext"),
        ("gIB", "gIB"),
        ("Socket", "Socket"),
        ("FastSocket", "FastSocket"),
        ("GPUDirectTCPX_v7", "GPUDirectTCPX"),
        ("FasTrak", "FasTrak"),
        ("Mystery", "Mystery"),
    ],
)
def test_canonical_transport(name, canonical):
    assert canonical_transport(name) == canonical


# ---- the -J JSON report (synthetic: no real one was found; see data/README.md) ---------------------


def test_json_report():
    test = parse_log(DATA / "synthetic-all_reduce-2x8-J.json")[0]
    assert test.format == "json"
    assert (test.collective, test.collective_source) == ("all_reduce", "command line")
    assert (test.ranks, test.ranks_source, test.hosts) == (16, "devices", ["gpu-0", "gpu-1"])
    assert test.nccl_version == "2.27.7"
    assert [row.size for row in test.rows] == [1073741824, 2147483648, 4294967296]
    first = test.rows[0]
    assert (first.redop, first.root) == ("sum", -1)
    assert _half(first.oop) == pytest.approx((4390.2, 244.576972, 458.581823, 0))
    assert test.rows[-1].ip.wrong is None  # "nwrong": null, as nccl-tests writes for N/A
    assert test.out_of_bounds == 0 and test.avg_busbw == pytest.approx(468.902382)
    assert not test.truncated and test.transport is None


def test_unfinished_json_report_is_an_error():
    with pytest.raises(LogParseError, match=r"unfinished.json: line 1: not valid JSON"):
        parse_log(DATA / "synthetic-all_reduce-J-unfinished.json")


def test_json_without_results_is_an_error():
    with pytest.raises(LogParseError, match="not an nccl-tests -J report"):
        parse_text('{"hello": 1}', name="x.json")


# ---- gpufleet's CPU benchmark for the local cluster (same format, real output) -----------------------


def test_local_cluster_benchmark_output():
    gather = parse_log(DATA / "mpi-perf-all_gather-4rank-tagged.log")[0]
    assert (gather.collective, gather.collective_source, gather.ranks, gather.hosts) == (
        "all_gather",
        "test name",
        4,
        ["vm"],
    )
    assert len(gather.rows) == 22 and gather.rows[-1].size == 16 << 20
    assert (gather.out_of_bounds, gather.wrong_total, gather.avg_busbw) == (0, 0, 0.534902)
    scatter = parse_log(DATA / "mpi-perf-reduce_scatter-3rank.log")[0]
    assert (scatter.collective, scatter.ranks, len(scatter.rows)) == ("reduce_scatter", 3, 20)
    assert {row.redop for row in scatter.rows} == {"sum"}
