"""Fuzzing the parsers: whatever the text, every call returns checked results (a figure above zero: `-0`
measures nothing) or raises ParseError.

Inputs: random bytes (decoded as the CLI decodes files), truncated and mutated real logs, real logs with their
numbers replaced by huge, negative, non-finite or 4,300-digit ones, `DLRUN_RESULT` followed by deep nesting
or JSON that is not an object, very long lines, and text that is not UTF-8. 10,000 inputs in all,
derandomised so that CI sees the same ones every time.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlrun.results.parsers import UNITS, ParsedResult, ParseError, parse_all, parse_text
from dlrun.results.parsers.common import LogFile

# The published benchmark logs (launcher-failures/ holds launchers' error messages, which carry no result), and
# nccl-tests' JSON.
CORPUS = sorted((path.name, path.read_text()) for path in (Path(__file__).parent / "data" / "logs").rglob("*")
                if path.parent.name != "launcher-failures"
                and (path.suffix == ".log" or path.name.startswith("nccl_tests_json")))
#: Logs of runs that failed before measuring anything: they parse to an error that says so, not a result.
FAILED_RUNS = {"nccl_tests_allreduce_rank_failure_8xh100_azure_stdout.log": "stopped before its first result row",
               "megatron_lm_gpt2_774m_v100_oom_terminal.log": "stopped before its first iteration line.*OutOfMemory"}
TEXTS = [text for _, text in CORPUS]
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def fuzz(examples: int) -> settings:
    # Inputs of megabyte lines and 200,000-deep nesting are the point here, so "too slow"/"too large" warnings
    # from hypothesis's health check would only hide them.
    return settings(max_examples=examples, derandomize=True, deadline=None, database=None, print_blob=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def check(text: str) -> None:
    """The contract: results that hold nothing impossible, or ParseError; any other exception fails."""
    try:
        results = parse_all(text)
    except ParseError as exc:
        assert str(exc) and "\n" not in str(exc)  # one line for the CLI to print
        return
    assert results
    for result in results:
        assert isinstance(result, ParsedResult)
        assert math.isfinite(result.value) and result.value > 0 and result.unit in UNITS  # -0 and 0 measure nothing
        for count in (result.num_devices, result.num_ranks, result.gpus_per_rank, result.batch_size):
            assert count is None or (isinstance(count, int) and count >= 1)
        for row in result.sizes:
            assert all(math.isfinite(v) and v >= 0 for v in (row.oop_busbw, row.ip_busbw, row.oop_time_us))
        json.dumps(result.to_dict())  # storable as the executor stores it
    try:
        parse_text(text)
    except ParseError:
        pass


@fuzz(2000)
@given(st.binary(max_size=3000))
def test_random_bytes(data):
    check(data.decode("utf-8", errors="replace"))


@fuzz(1000)
@given(st.binary(max_size=2000))
def test_not_utf8(data):
    check(data.decode("utf-8", errors="surrogateescape"))


@fuzz(2000)
@given(st.sampled_from(TEXTS), st.integers(0, 10**6), st.integers(0, 10**6))
def test_truncated_real_logs(text, start, length):
    start %= len(text) + 1
    check(text[start:start + length % (len(text) + 1)])


@fuzz(2000)
@given(st.sampled_from(TEXTS), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 40), st.text(max_size=40)),
                                        min_size=1, max_size=8))
def test_mutated_real_logs(text, edits):
    for position, cut, insert in edits:
        position %= len(text) + 1
        text = text[:position] + insert + text[position + cut:]
    check(text)


HOSTILE_NUMBERS = st.one_of(
    st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "-1", "-0.0", "-0", "+0", "0.000", "-0e5", "1e999",
                     "1e-999", "0", "9" * 4301,
                     "1" * 5000 + ".5", "0x10", "1_000", "١٢٣", "", "-", "1e", "N/A"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**50), max_value=10**50).map(str),
)


@fuzz(1500)
@given(st.sampled_from(TEXTS), st.lists(HOSTILE_NUMBERS, min_size=1, max_size=30), st.integers(0, 50))
def test_real_logs_with_hostile_numbers(text, numbers, skip):
    matches = list(NUMBER.finditer(text))[skip:]
    pieces, last = [], 0
    for match, number in zip(matches[:: max(1, len(matches) // len(numbers))], numbers):
        pieces += [text[last:match.start()], number]
        last = match.end()
    check("".join(pieces) + text[last:])


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20)
RESULT_KEYS = st.fixed_dictionaries({}, optional={
    "value": JSON_VALUES, "metric": JSON_VALUES, "unit": JSON_VALUES, "model": JSON_VALUES,
    "world_size": JSON_VALUES, "batch_size_per_rank": JSON_VALUES, "benchmark": JSON_VALUES})


@fuzz(1200)
@given(st.one_of(
    JSON_VALUES.map(json.dumps),
    RESULT_KEYS.map(json.dumps),
    st.integers(1, 200000).map(lambda depth: "[" * depth),
    st.integers(1, 5000).map(lambda depth: '{"a":' * depth + "1" + "}" * depth),
    st.integers(4000, 6000).map(lambda digits: '{"value": ' + "7" * digits + "}"),
), st.sampled_from(["DLRUN_RESULT ", "[1,0]<stdout>:DLRUN_RESULT ", ":::MLLOG ", " 3: DLLL ",
                      "DLL 2020-12-16 11:37:44.312825 - Summary: train.total_ips : ",
                      "DLL 2020-12-16 11:37:27.155029 - Epoch: 0 Iteration: 1  train.loss : "]))
def test_json_lines(payload, prefix):
    check(prefix + payload + "\n")


@fuzz(300)
@given(st.sampled_from(["total images/sec: ", "# Avg bus bandwidth    : ", "Total img/sec on 8 GPU(s): ",
                        "#   Rank  0 Pid 1 on ", "# nThread 1 nGpus ", "Devices: ", "A" * 100,
                        "DLL 2020-12-16 11:37:44.312825 - Summary: train.total_ips : ",
                        "DLL 2020-12-16 11:37:19.683203 - PARAMETER batch_size : ", "DLL 2020-12-16 07:25:18.740833 - ("]),
       st.integers(10**4, 3 * 10**5), st.sampled_from(["9", "x", "[", " ", "'a',", " : ", "  "]))
def test_very_long_lines(prefix, length, fill):
    check(prefix + fill * (length // len(fill)) + "\n")


def test_the_fuzz_corpus_is_the_real_logs():
    assert len(CORPUS) >= 13 and set(FAILED_RUNS) <= {name for name, _ in CORPUS}
    assert all(parse_all(text) for name, text in CORPUS if name not in FAILED_RUNS)
    for name, text in CORPUS:
        if name in FAILED_RUNS:
            with pytest.raises(ParseError, match=FAILED_RUNS[name]):
                parse_all(text)


def _outcome(source):
    try:
        return [result.to_dict() for result in parse_all(source)]
    except ParseError as exc:
        return str(exc)


@fuzz(400)
@given(st.sampled_from(TEXTS), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 40),
                                                  st.text(st.sampled_from("ab1.: {}\"\n\r\x0b\x85\u2028\tx-0"),
                                                          max_size=20)), max_size=6))
def test_a_log_read_a_line_at_a_time_parses_as_its_text(tmp_path_factory, text, edits):
    """`dlrun parse` reads a file a line at a time (LogFile): whatever the log, the results (or the error)
    are those of its whole text, whatever line separators it holds."""
    for position, cut, insert in edits:
        position %= len(text) + 1
        text = text[:position] + insert + text[position + cut:]
    path = tmp_path_factory.mktemp("log") / "fuzzed.log"
    path.write_bytes(text.encode())
    assert _outcome(LogFile(path, len(text.encode()))) == _outcome(text)
