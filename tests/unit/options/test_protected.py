"""protected.py: no path of a gate's config reaches the key's folder, the service's state or ds4ci's install."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds4ci.errors import UsageError
from ds4ci.options import config, protected
from ds4ci.options.protected import BIND, READ, WRITE, Protected, problem


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    found = {name: tmp_path / name for name in ("keys", "state", "models", "elsewhere")}
    for path in found.values():
        path.mkdir()
    (found["keys"] / "runner-key.pem").write_text("key\n")
    (found["state"] / "work" / "r1" / "src").mkdir(parents=True)
    return found


def guard(places: dict[str, Path], *, service: bool = True) -> Protected:
    folders = [("the signing key's folder", places["keys"].resolve())]
    if service:
        folders.append(("the gate service's state folder", places["state"].resolve()))
    state = (places["state"].resolve(),) if service else ()
    source = (places["state"] / "work" / "r1" / "src").resolve() if service else None
    return Protected(tuple(folders), unshown=state, install=protected.install_folders(), exempt=source, quiet=service)


def test_a_path_in_a_protected_folder_is_refused_by_its_key_and_folder(places: dict[str, Path]) -> None:
    said = problem("gate.hash_cache_path", WRITE, places["keys"] / "runner-key.pem", guard(places))
    assert said is not None and "gate.hash_cache_path" in said and "inside the signing key's folder" in said
    said = problem("sandbox.rw_paths", BIND, places["state"] / "requests", guard(places))
    assert said is not None and "the gate service's state folder" in said
    assert problem("gate.target", READ, places["models"] / "t.gguf", guard(places)) is None


def test_links_and_dotdot_are_resolved_before_comparing(places: dict[str, Path]) -> None:
    link = places["elsewhere"] / "prompt.txt"
    link.symlink_to(places["keys"] / "runner-key.pem")
    assert problem("gate.prompts", READ, link, guard(places)) is not None
    dotted = places["models"] / ".." / "state" / "requests"
    assert problem("gate.evidence_dir", WRITE, dotted, guard(places)) is not None
    # a link inside the request's own checkout that leads out of it is judged where it leads
    inner = places["state"] / "work" / "r1" / "src" / "p.txt"
    inner.symlink_to(places["keys"] / "runner-key.pem")
    assert problem("gate.prompts", READ, inner, guard(places)) is not None
    plain = places["state"] / "work" / "r1" / "src" / "q.txt"
    plain.write_text("a prompt\n")
    assert problem("gate.prompts", READ, plain, guard(places)) is None  # the pull request's own files


def test_a_bind_that_holds_the_service_state_is_refused_but_one_holding_only_the_key_folder_is_covered(
        places: dict[str, Path]) -> None:
    holder = places["state"].parent
    said = problem("sandbox.ro_paths", BIND, holder, guard(places))
    assert said is not None and "which holds the gate service's state folder" in said
    assert problem("sandbox.ro_paths", BIND, holder, guard(places, service=False)) is None  # the sandbox hides keys
    assert problem("gate.target", READ, holder, guard(places)) is None  # a file read holds nothing


def test_ds4ci_install_is_never_written_or_bound_writable(places: dict[str, Path]) -> None:
    import ds4ci

    inside = Path(ds4ci.__file__).parent / "cache.json"
    assert "ds4ci's own install" in str(problem("gate.hash_cache_path", WRITE, inside, guard(places)))
    assert problem("sandbox.ro_paths", BIND, inside.parent, guard(places)) is None  # reading it is harmless


def test_refuse_checks_the_files_paths_and_leaves_the_callers_flags_alone(places: dict[str, Path],
                                                                           tmp_path: Path) -> None:
    toml = tmp_path / "ds4ci.toml"
    toml.write_text(f'[gate]\nserver = "simulator"\ntarget = "{places["models"] / "t"}"\ntarget_sha256 = "{"a" * 64}"\n'
                    f'draft = "{places["models"] / "d"}"\ndraft_sha256 = "{"b" * 64}"\n'
                    f'prompts = [{{file = "{places["models"] / "p"}", sha256 = "{"c" * 64}"}}]\n'
                    f'hash_cache_path = "{places["keys"] / "runner-key.pem"}"\n'
                    f'[sandbox]\nrw_paths = ["{places["state"]}"]\n')
    flags = {"evidence_dir": places["state"] / "evidence", "service_state": places["state"]}
    cfg = config.load(toml, flags, check_files=False)
    with pytest.raises(UsageError) as refused:
        protected.refuse(cfg, flags, guard(places))
    said = str(refused.value)
    assert "gate.hash_cache_path" in said and "sandbox.rw_paths" in said and "evidence_dir" not in said


@pytest.mark.parametrize("where", ["state", "keys"])
def test_a_calibrations_folder_in_a_protected_folder_is_refused_unless_the_caller_gave_it(
        places: dict[str, Path], tmp_path: Path, where: str) -> None:
    """gate.calibrations is read (every record below it): it may not name the service's state or the key's folder."""
    toml = tmp_path / "ds4ci.toml"
    toml.write_text(f'[runner]\nrole = "negative-control"\n[gate]\ncalibrations = "{places[where]}"\n')
    cfg = config.load(toml, {}, check_files=False)
    assert ("gate.calibrations", READ, places[where]) in list(protected.config_paths(cfg, {}))
    with pytest.raises(UsageError, match=r"gate\.calibrations = .* inside the (gate service's state|signing key's)"):
        protected.refuse(cfg, {}, guard(places))
    given = {"calibrations": places[where]}
    assert not [k for k, _, _ in protected.config_paths(config.load(toml, given, check_files=False), given)
                if k == "gate.calibrations"]
    toml.write_text(f'[runner]\nrole = "negative-control"\n[gate]\ncalibrations = "{places["elsewhere"]}"\n')
    protected.refuse(config.load(toml, {}, check_files=False), {}, guard(places))  # a folder of its own: allowed
