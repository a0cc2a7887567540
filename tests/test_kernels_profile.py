"""Kernel profiles: real PyTorch-profiler traces on CPU, the trace and ncu-CSV parsers, the command and plots."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from profiler.gpu.ncu import METRICS, ncu_commands, parse_ncu_csv
from profiler.kernels import cpu_ops_self_time, kernel_rows_from_trace, profile_kernels
from profiler.results.schema import KERNEL_COLUMNS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# A raw-page CSV in the layout `ncu --csv --page raw` prints (header, units row, one row per launch),
# preceded by the lines ncu and the program print before it. Values written by hand for this test.
NCU_SAMPLE = """==PROF== Connected to process 4242 (/usr/bin/python3.11)
training step done
==PROF== Disconnected from process 4242
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum","launch__occupancy_limit_blocks","launch__occupancy_limit_registers","launch__occupancy_limit_shared_mem","launch__occupancy_limit_warps","launch__registers_per_thread","launch__shared_mem_per_block_dynamic","launch__shared_mem_per_block_static","sm__throughput.avg.pct_of_peak_sustained_elapsed","sm__warps_active.avg.pct_of_peak_sustained_active","sm__warps_active.avg.per_cycle_active"
"","","","","","","","","","","","%","usecond","block","block","block","block","register/thread","byte/block","Kbyte/block","%","%","warp"
"0","4242","python3.11","node1","void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::WinogradDataParams<float, float>)","1","7","(256, 1, 1)","(1568, 1, 1)","0","9.0","61.25","1,234.50","32","4","8","8","64","0","12.29","45.10","72.40","46.34"
"1","4242","python3.11","node1","void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, at::native::FillFunctor<float>, at::detail::Array<char *, 1>)","1","7","(128, 1, 1)","(64, 2, 1)","0","9.0","88.00","3.20","32","16","32","16","16","0","0","12.00","30.50","19.52"
"""


def test_ncu_parser_reads_units_separators_and_geometry() -> None:
    rows = parse_ncu_csv(NCU_SAMPLE)
    assert len(rows) == 2
    first, second = rows
    assert first["kernel"].startswith("void cudnn::winograd")
    assert first["duration_us"] == pytest.approx(1234.5)  # "1,234.50" usecond
    assert first["grid"] == "1568,1,1" and first["block"] == "256,1,1"
    assert first["shared_memory_bytes"] == pytest.approx(12_290)  # 12.29 Kbyte static + 0 dynamic
    assert first["blocks_per_sm"] == 4  # the tightest occupancy limit
    assert first["occupancy_pct"] == pytest.approx(72.4) and first["dram_throughput_pct"] == pytest.approx(61.25)
    assert first["sm_throughput_pct"] == pytest.approx(45.1) and first["warps_per_sm"] == pytest.approx(46.34)
    assert second["registers_per_thread"] == 16 and second["grid"] == "64,2,1"


def test_ncu_parser_handles_nanoseconds_and_rejects_non_csv() -> None:
    text = NCU_SAMPLE.replace('"usecond"', '"nsecond"')
    assert parse_ncu_csv(text)[1]["duration_us"] == pytest.approx(0.0032)
    from common.errors import InputError

    with pytest.raises(InputError, match="no CSV header"):
        parse_ncu_csv("==PROF== nothing was profiled\n")


def test_ncu_command_profiles_alone_with_own_clocks() -> None:
    collect, read = ncu_commands("/opt/ncu", Path("/tmp/report"), ["--model", "resnet18"])
    assert collect[:1] == ["/opt/ncu"] and "--target-processes" in collect
    assert collect[collect.index("--profile-from-start") + 1] == "off"
    assert collect[collect.index("--clock-control") + 1] == "none"
    assert set(collect[collect.index("--metrics") + 1].split(",")) == set(METRICS)
    assert collect[-4:] == ["profiler.kernels", "--worker", "--model", "resnet18"]
    assert read == ["/opt/ncu", "--import", "/tmp/report.ncu-rep", "--csv", "--page", "raw"]


def test_trace_parser_reads_kernel_args_of_both_profiler_generations() -> None:
    trace = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "sgemm_128x64", "dur": 12.5,
         "args": {"grid": [80, 2, 1], "block": [256, 1, 1], "registers per thread": 126, "shared memory": 16384,
                  "blocks per SM": 0.96, "warps per SM": 7.7, "est. achieved occupancy %": 12}},
        {"ph": "X", "cat": "kernel", "name": "relu_kernel", "dur": 3,
         "args": {"grid": [10, 1, 1], "block": [128, 1, 1], "theoretical occupancy %": 100}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "dur": 30, "ts": 0},
    ]}
    rows = kernel_rows_from_trace(trace)
    assert [r["kernel"] for r in rows] == ["sgemm_128x64", "relu_kernel"]
    assert rows[0]["grid"] == "80,2,1" and rows[0]["occupancy_pct"] == 12 and rows[0]["shared_memory_bytes"] == 16384
    assert rows[1]["occupancy_pct"] == 100 and pd.isna(rows[1]["registers_per_thread"])


def test_cpu_operator_self_time_subtracts_nested_operators() -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "ts": 0, "dur": 100, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::convolution", "ts": 1, "dur": 98, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mkldnn_convolution", "ts": 2, "dur": 90, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "ts": 3, "dur": 5, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "ts": 100, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "ts": 50, "dur": 10, "pid": 1, "tid": 2},  # other thread
    ]
    ops = {(op["name"], op["ts"]): op["self_us"] for op in cpu_ops_self_time(events)}
    assert ops[("aten::conv2d", 0.0)] == pytest.approx(2)
    assert ops[("aten::convolution", 1.0)] == pytest.approx(8)
    assert ops[("aten::mkldnn_convolution", 2.0)] == pytest.approx(85)
    assert ops[("aten::relu", 100.0)] == pytest.approx(10) and ops[("aten::relu", 50.0)] == pytest.approx(10)
    assert sum(ops.values()) == pytest.approx(100 + 10 + 10)  # wall time of the top-level operators


def test_profile_kernels_on_cpu_records_operators_of_two_iterations() -> None:
    frame = profile_kernels("tiny_cnn", 4, 32, "cpu", warmup_iters=1, num_classes=10, seed=0, threads=1)
    assert list(frame.columns) == list(KERNEL_COLUMNS)
    assert len(frame) > 20 and set(frame["backend"]) == {"torch-profiler"} and set(frame["gpu_type"]) == {"cpu"}
    assert set(frame["job_type"]) == {"tiny_cnn@4"} and (frame["duration_us"] > 0).all()
    # tiny_cnn has 3 convolutions: forward and backward of each, once per profiled iteration
    assert (frame["kernel"] == "aten::mkldnn_convolution").sum() == 3 * 2
    assert frame["occupancy_pct"].isna().all() and frame["grid"].isna().all()
    one = profile_kernels("tiny_cnn", 4, 32, "cpu", warmup_iters=1, iters=1, threads=1)
    assert (one["kernel"] == "aten::mkldnn_convolution").sum() == 3


@pytest.mark.gpu
def test_profile_kernels_on_cuda_has_occupancy_estimates() -> None:
    frame = profile_kernels("resnet18", 32, 32, "cuda", warmup_iters=3)
    assert len(frame) > 50 and frame["occupancy_pct"].notna().mean() > 0.5
    assert frame["grid"].str.count(",").eq(2).all()


@pytest.mark.slow
def test_kernel_plots_from_ncu_rows(tmp_path: Path) -> None:
    from colocate.analysis.plots import kernel_averages, plot_kernel_averages, plot_kernel_histograms
    from profiler.kernels import kernel_frame

    rows = parse_ncu_csv(NCU_SAMPLE)
    frames = [kernel_frame(rows, model=m, batch_size=b, job_type=f"{m}@{b}", image_size=224, gpu_name="NVIDIA H100",
                           gpu_type="h100", backend="ncu") for m in ("resnet18", "vgg11") for b in (64, 128)]
    kernels = pd.concat(frames, ignore_index=True)
    averages = kernel_averages(kernels)
    expected = (72.4 * 1234.5 + 30.5 * 3.2) / (1234.5 + 3.2)  # duration-weighted
    assert averages["occupancy_pct"].tolist() == pytest.approx([expected] * 4)
    bars, notes = plot_kernel_averages(kernels, tmp_path)
    hists, _ = plot_kernel_histograms(kernels, tmp_path)
    assert len(bars) == 3 and len(hists) == 4 and not notes
    for path in bars + hists:
        assert path.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.slow
def test_kernels_command_writes_table_resumes_and_rejects_ncu_on_cpu(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"name": "k", "device": "cpu", "models": ["tiny_cnn"], "batch_sizes": [2, 4],
                                    "image_size": 32, "warmup_iters": 1, "threads_per_job": 1}))
    out = tmp_path / "kernels"
    command = [sys.executable, "-m", "colocate.cli", "kernels", str(spec), "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    table = pd.read_parquet(out / "kernels.parquet")
    assert set(table["job_type"]) == {"tiny_cnn@2", "tiny_cnn@4"}
    assert (out / "kernels.csv").is_file() and (out / "kernels_meta.json").is_file()
    assert (out / "kernels_hist_duration_us_cpu_torch-profiler.png").read_bytes()[:8] == PNG_MAGIC
    again = subprocess.run(command + ["--no-plots"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0
    assert len(pd.read_parquet(out / "kernels.parquet")) == len(table)  # nothing re-run, nothing duplicated
    failed = subprocess.run(command + ["--backend", "ncu"], capture_output=True, text=True, timeout=600)
    assert failed.returncode == 2 and "ncu" in failed.stderr and "Traceback" not in failed.stderr
