"""`target.endpoints` and `target.route` (docs/replicas.md): each bad combination is refused by
`loadgate validate` in one line naming the file, line, key and reason (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgate.config.profile import load_profile
from tests.config.test_profile_errors import Case, _assert_one_line_error, _validate

A, B = "http://127.0.0.1:8001", "http://127.0.0.1:8002"
SESSIONS = "workload:\n  sessions: {turns: 2}\n"

REFUSED: dict[str, Case] = {
    "endpoints_empty": Case(
        "target:\n  endpoints: []\n", 2, "target.endpoints", "is empty"),
    "a_url_listed_twice": Case(
        f"target:\n  endpoints: [{A}, {B}, '{A}/']\n", 2, "target.endpoints[2]",
        f"'{A}/' is listed twice (also endpoints[0])"),
    "a_non_http_url": Case(
        f"target:\n  endpoints: [{A}, 'grpc://127.0.0.1:9']\n", 2, "target.endpoints[1]",
        "expected an http:// or https:// URL, got 'grpc://127.0.0.1:9'"),
    "endpoint_and_endpoints_both_set": Case(
        f"target:\n  endpoint: {A}\n  endpoints: [{B}]\n", 2, "target.endpoint",
        "set target.endpoint or target.endpoints, not both"),
    "via_router_without_the_router": Case(
        f"target:\n  route: via_router\n  endpoints: [{A}, {B}]\n", 2, "target.route",
        "via_router sends every request to target.endpoint, the router"),
    "a_route_without_endpoints": Case(
        "target:\n  route: least_in_flight\n", 2, "target.route",
        "least_in_flight chooses among target.endpoints, and none are listed"),
    "an_unknown_route": Case(
        f"target:\n  route: random\n  endpoints: [{A}]\n", 2, "target.route", "random"),
    "sticky_without_conversations": Case(
        f"target:\n  route: sticky\n  endpoints: [{A}, {B}]\n", 2, "target.route",
        "sticky keeps a conversation's turns on one replica: it needs conversations (workload.sessions)"),
    "round_robin_with_one_metrics_url": Case(
        f"target:\n  endpoints: [{A}, {B}]\n  metrics_url: {A}/metrics\n", 3, "target.metrics_url",
        "each replica's own /metrics is read"),
    "round_robin_with_a_prefix_cache_reset": Case(
        f"target:\n  endpoints: [{A}, {B}]\nload:\n  concurrency: 2\n  reset_prefix_cache: true\n", 5, "load.reset_prefix_cache",
        "emptying every replica's prefix cache between levels is not built yet"),
    "sticky_with_one_metrics_url": Case(
        f"target:\n  route: sticky\n  endpoints: [{A}, {B}]\n  metrics_url: {A}/metrics\n" + SESSIONS, 4,
        "target.metrics_url", "with route sticky each replica's own /metrics is read"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_bad_endpoints_setting_is_refused_in_one_line(name: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    case = REFUSED[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(case.text)
    code, out, err = _validate(path, capsys)
    assert code == 2 and out == ""
    _assert_one_line_error(err, str(path), case.line, case.path, case.reason)


def test_replicas_behind_a_router_are_accepted_with_the_router_as_endpoint(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(f"target:\n  endpoint: http://127.0.0.1:8000\n  route: via_router\n  endpoints: [{A}, '{B}/']\n")
    t = load_profile(path).target
    assert t.endpoint == "http://127.0.0.1:8000" and t.route == "via_router"
    assert t.replicas == (A, B)  # trailing slash dropped, as with target.endpoint
    assert load_profile(_write(tmp_path, "target: {endpoint: 'http://127.0.0.1:8000'}\n")).target.replicas == ()
    assert load_profile(_write(tmp_path, f"target:\n  route: least_in_flight\n  endpoints: [{A}, {B}]\n")
                        ).target.route == "least_in_flight"
    sticky = load_profile(_write(tmp_path, f"target:\n  route: sticky\n  endpoints: [{A}, {B}]\n" + SESSIONS))
    assert sticky.target.route == "sticky" and sticky.workload.sessions is not None


def _write(tmp: Path, text: str) -> Path:
    p = tmp / "q.yaml"
    p.write_text(text)
    return p
