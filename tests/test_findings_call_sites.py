"""Hottest ops list every call site an op's time was spent at, with each site's share, not just one."""

from __future__ import annotations

from pyprof.cpu_findings import format_findings, hot_ops_finding


def rec(op, ns, trace=(), layer=(), d="bprop"):
    return {"kShortName": "aten::addmm", "op": op, "dir": d, "kDuration": ns, "trace": list(trace),
            "layer": list(layer), "ranges": [], "pid": 1}


def _block(lines, head):
    """The op line starting with ``head`` and the indented site lines under it."""
    i = next(i for i, line in enumerate(lines) if line.startswith(head))
    out = [lines[i]]
    for line in lines[i + 1:]:
        if not line.startswith("  "):
            break
        out.append(line)
    return out


def test_one_line_calling_three_layers_is_three_call_sites_with_shares():
    # one source line (a loop over an nn.Sequential) runs linear in layers 0, 2 and 4
    records = [rec("linear", 300_000, ["mlp.py:10:<module>"], ["Sequential", "0"]),
               rec("linear", 100_000, ["mlp.py:10:<module>"], ["Sequential", "2"]),
               rec("linear", 143_000, ["mlp.py:10:<module>"], ["Sequential", "2"]),
               rec("linear", 100_000, ["mlp.py:10:<module>"], ["Sequential", "4"]),
               rec("relu", 357_000, ["mlp.py:10:<module>"], ["Sequential", "1"])]
    f = hot_ops_finding(records)
    block = _block(f.lines, "linear (bprop)")
    assert "643 us" in block[0] and "64.3% of kernel time" in block[0] and "3 call sites" in block[0]
    assert block[1:] == ["   46.7%    300 us  mlp.py:10:<module> [0]",
                         "   37.8%    243 us  mlp.py:10:<module> [2]",
                         "   15.6%    100 us  mlp.py:10:<module> [4]"]
    op = f.numbers["ops"][0]
    assert op["site"] == "mlp.py:10:<module> [0]"
    assert [(s["site"], s["ns"]) for s in op["sites"]] == [
        ("mlp.py:10:<module> [0]", 300_000), ("mlp.py:10:<module> [2]", 243_000), ("mlp.py:10:<module> [4]", 100_000)]
    assert abs(sum(s["share"] for s in op["sites"]) - 1.0) < 1e-12


def test_more_than_three_sites_end_with_the_rest_summed():
    records = [rec("conv2d", ns, [f"net.py:{line}:forward"], [f"conv{line}"])
               for line, ns in ((1, 5_000_000), (2, 3_000_000), (3, 1_000_000), (4, 600_000), (5, 400_000))]
    block = _block(hot_ops_finding(records).lines, "conv2d (bprop)")
    assert len(block) == 5
    assert block[1].split() == ["50.0%", "5.00", "ms", "net.py:1:forward", "[conv1]"]
    assert block[3].split() == ["10.0%", "1.00", "ms", "net.py:3:forward", "[conv3]"]
    assert block[4].split() == ["10.0%", "1.00", "ms", "+2", "more", "call", "sites"]


def test_same_line_reached_from_different_callers_shows_the_callers():
    records = [rec("matmul", 700, ["blocks.py:4:proj", "model.py:20:forward"], d="fprop"),
               rec("matmul", 300, ["blocks.py:4:proj", "model.py:31:forward"], d="fprop")]
    block = _block(hot_ops_finding(records).lines, "matmul (fprop)")
    assert block[1].endswith("blocks.py:4:proj < model.py:20:forward") and "70.0%" in block[1]
    assert block[2].endswith("blocks.py:4:proj < model.py:31:forward") and "30.0%" in block[2]


def test_records_without_trace_or_time_say_so_rather_than_zero():
    records = [rec("add_", 0, d="optim"), rec("add_", 0, layer=["fc"], d="optim")]
    f = hot_ops_finding(records)
    block = _block(f.lines, "add_ (optim)")
    assert "n/a of kernel time" in block[0] and "2 call sites" in block[0]
    assert {line.split(None, 3)[3] for line in block[1:]} == {"(no call site)", "(no call site) [fc]"}
    assert all(line.split()[0] == "n/a" for line in block[1:])
    assert f.numbers["ops"][0]["share"] is None


def test_findings_text_lists_sites_under_their_op():
    text = format_findings([hot_ops_finding([rec("linear", 2_500_000_000, ["a.py:1:f"], ["m"])])])
    assert text.splitlines()[2:] == ["    linear (bprop)                      2.50 s  100.0% of kernel time, 1 call site",
                                     "      100.0%    2.50 s  a.py:1:f [m]"]
