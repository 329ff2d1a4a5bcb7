"""CPU findings over records: oversubscription, reorder/copy time, hottest ops with call sites."""

from __future__ import annotations

from pyprof.cpu_findings import findings, format_findings, hot_ops_finding, reorder_finding, thread_finding


def rec(name, ns, op=None, ranges=(), trace=None, layer=None, d="fprop", pid=1):
    return {"kShortName": name, "kDuration": ns, "op": op, "dir": d, "pid": pid, "aten": name,
            "ranges": [{"text": t, "domain": None} for t in ranges], "trace": trace or [], "layer": layer or []}


def test_oversubscription_is_flagged_with_numbers():
    env = {"intra_op_threads": 8, "processes": 2, "physical_cores": 4, "usable_cpus": 8, "vars": {"OMP_NUM_THREADS": "4"}}
    f = thread_finding(env)
    assert f.warn
    assert f.numbers == {"intra_op_threads": 8, "processes": 2, "threads_total": 16, "physical_cores": 4}
    text = "\n".join(f.lines)
    assert "8 intra-op threads x 2 process(es) = 16 threads on 4 physical cores" in text
    assert "oversubscribed by 4.0x" in text and "OMP_NUM_THREADS=2" in text
    assert "OMP_NUM_THREADS=4 but torch runs 8" in text


def test_processes_counted_from_records_too():
    env = {"intra_op_threads": 2, "processes": 1, "physical_cores": 4}
    f = thread_finding(env, [rec("aten::mm", 1, pid=1), rec("aten::mm", 1, pid=2), rec("aten::mm", 1, pid=3)])
    assert f.numbers["threads_total"] == 6 and f.warn


def test_fitting_threads_are_not_flagged():
    f = thread_finding({"intra_op_threads": 4, "processes": 1, "physical_cores": 4})
    assert not f.warn


def test_reorder_time_counts_each_kernel_once_under_any_copy_op():
    records = [
        rec("aten::mkldnn_convolution", 600, "conv2d"),
        # contiguous -> clone -> copy_: the copy_ kernel is counted once, under its outermost reorder op
        rec("aten::copy_", 250, "contiguous", ranges=["aten::contiguous", "aten::clone", "aten::copy_"],
            trace=["train.py:9:forward"]),
        rec("aten::to_dense", 100, "to_dense", ranges=["aten::to_dense"], trace=["train.py:12:forward"]),
        rec("aten::addmm", 50, "linear"),
    ]
    f = reorder_finding(records)
    assert f.numbers["ns"] == 350
    assert abs(f.numbers["share"] - 0.35) < 1e-12
    assert f.numbers["by_op"] == {"aten::contiguous": 250, "aten::to_dense": 100}
    assert f.warn  # >= 10 % of kernel time
    assert "train.py:9:forward" in "\n".join(f.lines)


def test_hottest_ops_with_their_call_sites_and_shares():
    records = [rec("aten::mkldnn_convolution", 700, "conv2d", trace=["net.py:5:forward"], layer=["conv1"]),
               rec("aten::mkldnn_convolution", 100, "conv2d", trace=["net.py:6:forward"], layer=["conv2"]),
               rec("aten::addmm", 200, "linear", trace=["net.py:9:forward"], layer=["fc"])]
    f = hot_ops_finding(records, top=2)
    ops = f.numbers["ops"]
    assert [o["op"] for o in ops] == ["conv2d (fprop)", "linear (fprop)"]
    assert ops[0]["ns"] == 800 and abs(ops[0]["share"] - 0.8) < 1e-12
    assert ops[0]["site"] == "net.py:5:forward [conv1]"


def test_findings_over_no_records_still_reports_threads():
    items = findings([], {"intra_op_threads": 2, "processes": 1, "physical_cores": 2})
    assert [f.kind for f in items] == ["threads"]
    assert format_findings(items).startswith("CPU findings\n- CPU threads")
