"""`coderl bench proxy --quick`: real processes on loopback (scripted engines, coderl proxies)."""

from __future__ import annotations

import json
import math

import pytest

from coderl.bench.proxy import to_markdown
from coderl.cli.main import main


@pytest.mark.slow
def test_bench_proxy_quick_reports_latency_and_throughput(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["bench", "proxy", "--quick", "--no-litellm", "--latency", "0.5", "--calls", "2", "--json"]) == 0
    )
    r = json.loads(capsys.readouterr().out)
    for key in ("added_latency_p50_ms", "added_latency_p99_ms", "throughput_ratio_1", "throughput_ratio_16"):
        assert math.isfinite(r[key]), key
    assert r["raw"]["p50_plain_ms"] > 0 and r["direct"]["p50_plain_ms"] > 0
    assert 0 < r["first_chunk_p50_ms"] <= r["raw"]["p50_stream_ms"]  # time to the first content chunk
    # every call waited 0.5 s in the engine: neither path can beat 2 calls/s per session
    assert 0 < r["raw"]["rps_1"] <= 2.05 and 0 < r["direct"]["rps_1"] <= 2.05
    assert r["throughput_ratio_16"] > 0.3  # the proxy does not collapse under concurrent sessions
    # the Responses API, measured the same way beside chat completions
    resp = r["responses"]
    assert math.isfinite(resp["added_latency_p50_ms"]) and 0 < resp["raw"]["rps_1"] <= 2.05
    assert 0 < resp["first_chunk_p50_ms"] <= resp["raw"]["p50_stream_ms"]
    assert "| coderl proxy, Responses API |" in to_markdown(r)
