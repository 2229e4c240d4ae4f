"""The exact-differential trace reader, on lines in the shape the real writer prints (its format facts:
records ``{"schema":"lucebox.ds4.exact-diff/v1","type":...}``, one model_config first, then per request
request_start, its diagnostic records, tokens, request_end; requests numbered from 0)."""

from __future__ import annotations

import os
from pathlib import Path

from ds4ci.judging import exacttrace

S = '"schema":"lucebox.ds4.exact-diff/v1"'
CONFIG = '{' + S + ',"type":"model_config","n_swa":128,"compressor_boundaries":[4,128]}'


def start(k: int) -> str:
    return ('{' + S + f',"type":"request_start","request":{k},"width":1,"restored":false,"cache_position":0,'
            '"prompt_tokens":3,"prompt_token_hash":"cbf29ce484222325","prompt_token_ids":[0,5,9],"n_gen":4,'
            '"snap_slot":-1,"snap_pos":-1,"temperature":0,"top_p":1,"top_k":0,"seed":1234}')


def step(k: int) -> str:
    return ('{' + S + f',"type":"step","request":{k},"position_begin":0,"position_end":3,"position":3,"width":3,'
            '"cache_position":3,"logits_present":true,"relations":["tail_width_3","dspark_capture_window"]}')


def tokens(k: int, ids: str = "[7,8,9,10]") -> str:
    return '{' + S + f',"type":"tokens","request":{k},"token_ids":{ids}}}'


def end(k: int, ok: str = "true") -> str:
    return '{' + S + f',"type":"request_end","request":{k},"ok":{ok},"cache_position":7}}'


def request(k: int) -> list[str]:
    return [start(k), step(k), tokens(k), end(k)]


def parse(lines: list[str]) -> exacttrace.ExactTrace:
    return exacttrace.parse(("\n".join(lines) + "\n").encode(), "t.jsonl")


def test_two_requests_give_their_tokens_in_order() -> None:
    trace = parse([CONFIG, *request(0), *request(1)])
    assert trace.problem is None
    assert [(r.request, r.line, r.token_ids, r.ok) for r in trace.requests] == [
        (0, 4, (7, 8, 9, 10), True), (1, 8, (7, 8, 9, 10), True)]


def test_a_failed_request_end_is_kept_for_judging() -> None:
    (found,) = parse([CONFIG, start(0), tokens(0), end(0, "false")]).requests
    assert found.ok is False


def problem(lines: list[str]) -> str:
    trace = parse(lines)
    assert trace.requests == () and trace.problem is not None
    return trace.problem


def test_a_request_without_tokens_is_refused_naming_the_line() -> None:
    assert problem([CONFIG, start(0), end(0)]) == "t.jsonl line 3: request_end of request 0 without its tokens record"


def test_two_tokens_records_for_one_request_are_refused() -> None:
    assert problem([CONFIG, start(0), tokens(0), tokens(0), end(0)]).startswith(
        "t.jsonl line 4: expected the request_end of request 0 right after its tokens record, found 'tokens'")


def test_records_after_request_end_are_refused() -> None:
    assert problem([CONFIG, *request(0), step(0)]).startswith("t.jsonl line 6: a step record of request 0 outside any request")


def test_a_skipped_or_repeated_request_number_is_refused() -> None:
    assert "expected request 1" in problem([CONFIG, *request(0), *request(2)])
    assert "expected request 1" in problem([CONFIG, *request(0), *request(0)])


def test_a_record_of_another_request_inside_one_is_refused() -> None:
    found = problem([CONFIG, start(0), step(1), tokens(0), end(0)])
    assert found == "t.jsonl line 3: a step record of request 1 inside request 0"


def test_a_missing_request_end_at_the_end_is_refused() -> None:
    assert problem([CONFIG, start(0), step(0)]) == "t.jsonl: request 0 has no request_end (the trace ends inside it)"


def test_the_model_config_must_come_first_and_once() -> None:
    assert problem([start(0), tokens(0), end(0)]).startswith("t.jsonl line 1: expected the model_config record first")
    assert "model_config record after the first line" in problem([CONFIG, CONFIG])


def test_malformed_lines_are_refused() -> None:
    found = problem([CONFIG, start(0), tokens(0, "[7,true]"), end(0)])
    assert found == "t.jsonl line 3: token_ids holds true, not a 32-bit integer"
    assert problem([CONFIG, start(0), tokens(0, "[7,4294967296]"), end(0)]).startswith("t.jsonl line 3: token_ids holds")
    assert problem([CONFIG, '{"type":"request_start","request":0}']).startswith("t.jsonl line 2: expected schema")
    assert problem([CONFIG, start(0) + ",", tokens(0), end(0)]).startswith("t.jsonl line 2:")
    assert problem([CONFIG, "", start(0)]).startswith("t.jsonl line 2:")
    assert problem([CONFIG, '{' + S + ',"type":"weights","request":0}']).startswith("t.jsonl line 2: unknown record type")
    assert problem([CONFIG, start(0), tokens(0), end(0, '"yes"')]).startswith("t.jsonl line 4: expected ok true or false")


def test_a_cut_off_or_empty_file_is_refused() -> None:
    assert exacttrace.parse(f"{CONFIG}\n{start(0)}".encode(), "t.jsonl").problem == (
        "t.jsonl: the last line is not complete (no newline): the trace was cut off")
    assert exacttrace.parse(b"", "t.jsonl").problem == "t.jsonl is empty; expected a model_config record first"


def test_the_sealed_file_is_read_confined(tmp_path: Path) -> None:
    (tmp_path / "real.jsonl").write_text("\n".join([CONFIG, *request(0)]) + "\n")
    assert exacttrace.read(tmp_path, "real.jsonl").requests[0].token_ids == (7, 8, 9, 10)
    os.symlink(tmp_path / "real.jsonl", tmp_path / "link.jsonl")
    assert exacttrace.read(tmp_path, "link.jsonl").problem is not None
    os.mkfifo(tmp_path / "fifo.jsonl")
    assert exacttrace.read(tmp_path, "fifo.jsonl").problem is not None


def test_a_count_other_than_the_requests_sent_is_refused(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text("\n".join([CONFIG, *request(0)]) + "\n")
    found, why = exacttrace.for_server(tmp_path, "t.jsonl", 2, "collected")
    assert found == () and why == "t.jsonl records 1 request(s); 2 were sent to this server, one at a time"
    assert exacttrace.for_server(tmp_path, "t.jsonl", 1, "collected")[1] is None
    found, why = exacttrace.for_server(tmp_path, "none.jsonl", 1, "absent (the server wrote no trace file)")
    assert why is not None and "absent (the server wrote no trace file)" in why
