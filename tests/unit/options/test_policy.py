"""The arms' environments: inherited policy stripped, common policy fixed, only activation differs."""

from __future__ import annotations

from ds4ci.options import policy

INHERITED = {
    "PATH": "/usr/bin",
    "HOME": "/root",
    "DFLASH_DS4_FUSED_VERIFY": "1",
    "DFLASH_DS4_SPEC_Q": "7",
    "DFLASH_EXPERT_CACHE": "3",
    "DFLASH_MOE_TOPK": "2",
    "DFLASH_MMQ_SUB_BATCH": "4",
    "GGML_BATCH_PEER_COPIES": "1",
    "GGML_CUDA_BATCH_PEER_COPIES": "1",
    "LUCE_MMVQ_MAX_NCOLS": "1",
    "LUCE_DS4_SPEC_REFERENCE_EXACT": "0",
    "LUCE_EXPERT_X": "1",
    "LUCE_MOE_Y": "1",
    "DS4SIM_FAULTS": "",
    "DFLASH_ADAPTIVE_SPEC_WIDTH": "1",
    "LUCE_ADAPTIVE_SPEC_WIDTH": "1",
    "GGML_CUDA_DISABLE_FUSION": "1",
    "HIP_VISIBLE_DEVICES": "0",
}
BOTH = ("DFLASH_", "LUCE_")


def test_inherited_policy_is_removed_from_both_arms() -> None:
    target = policy.target_only_env(INHERITED, 4, BOTH)
    spec = policy.reference_exact_env(INHERITED, 4, BOTH, "/m/draft.gguf", 3)
    for arm in (target, spec):
        assert "DFLASH_DS4_FUSED_VERIFY" not in arm.env
        assert "DFLASH_EXPERT_CACHE" not in arm.env and "DFLASH_MOE_TOPK" not in arm.env
        assert "DFLASH_MMQ_SUB_BATCH" not in arm.env
        assert "GGML_BATCH_PEER_COPIES" not in arm.env and "GGML_CUDA_BATCH_PEER_COPIES" not in arm.env
        assert arm.env.get("LUCE_DS4_SPEC_REFERENCE_EXACT") == (None if arm is target else "1")  # inherited "0" gone
        assert "LUCE_EXPERT_X" not in arm.env and "LUCE_MOE_Y" not in arm.env
        assert arm.env["LUCE_MMVQ_MAX_NCOLS"] == "4"
        assert arm.env["PATH"] == "/usr/bin"  # non-policy variables pass through
    assert "DFLASH_DS4_SPEC_Q" not in target.env
    assert spec.env["DFLASH_DS4_SPEC_Q"] == "3"


def test_arms_differ_only_in_activation_variables() -> None:
    target = policy.target_only_env(INHERITED, 4, BOTH)
    spec = policy.reference_exact_env(INHERITED, 4, BOTH, "/m/draft.gguf", 2)
    assert policy.difference(target, spec) == [
        "DFLASH_DS4_DRAFT", "DFLASH_DS4_SPEC", "DFLASH_DS4_SPEC_Q", "DFLASH_DS4_SPEC_REFERENCE_EXACT",
        "LUCE_DS4_DRAFT", "LUCE_DS4_SPEC", "LUCE_DS4_SPEC_Q", "LUCE_DS4_SPEC_REFERENCE_EXACT",
    ]
    assert policy.check_only_activation_differs(target, spec) == []
    assert spec.env["DFLASH_DS4_SPEC_REFERENCE_EXACT"] == "1" and spec.env["DFLASH_DS4_SPEC"] == "1"


def test_a_difference_outside_activation_is_reported() -> None:
    target = policy.target_only_env(INHERITED, 4, BOTH)
    spec = policy.reference_exact_env(INHERITED, 4, BOTH, "/m/draft.gguf", 2)
    tampered = policy.ArmEnvironment(spec.arm, spec.q, {**spec.env, "DFLASH_DS4_FUSED_VERIFY": "1"})
    assert policy.check_only_activation_differs(target, tampered) == ["DFLASH_DS4_FUSED_VERIFY"]


def test_removed_lists_names_only_and_policy_part_is_sorted() -> None:
    removed = policy.removed_policy(INHERITED)
    assert "DFLASH_DS4_FUSED_VERIFY" in removed and "PATH" not in removed and "DS4SIM_FAULTS" not in removed
    part = policy.target_only_env(INHERITED, 4, BOTH).policy()
    assert list(part) == sorted(part)
    assert part == policy.common_policy(4, BOTH)


def test_job_credentials_never_reach_the_server_under_test() -> None:
    inherited = {**INHERITED, "GITHUB_TOKEN": "ghs_x", "ACTIONS_RUNTIME_TOKEN": "y", "GH_TOKEN": "z"}
    for arm in (policy.target_only_env(inherited, 4, BOTH), policy.reference_exact_env(inherited, 4, BOTH, "/d", 2)):
        assert not {"GITHUB_TOKEN", "ACTIONS_RUNTIME_TOKEN", "GH_TOKEN"} & set(arm.env)


def test_adaptive_width_variables_are_stripped_and_numerics_knobs_pass_through() -> None:
    for arm in (policy.target_only_env(INHERITED, 4, BOTH), policy.reference_exact_env(INHERITED, 4, BOTH, "/d", 2)):
        assert "DFLASH_ADAPTIVE_SPEC_WIDTH" not in arm.env and "LUCE_ADAPTIVE_SPEC_WIDTH" not in arm.env
        assert arm.env["GGML_CUDA_DISABLE_FUSION"] == "1" and arm.env["HIP_VISIBLE_DEVICES"] == "0"


def test_one_prefix_sets_policy_and_activation_under_that_prefix_only() -> None:
    spec = policy.reference_exact_env(INHERITED, 4, ("LUCE_",), "/d", 2)
    assert spec.env["LUCE_DS4_SPEC"] == "1" and spec.env["LUCE_DS4_EXACT_VERIFY_TRACE"] == "1"
    assert not [k for k in spec.env if k.startswith("DFLASH_DS4_")]


def test_provenance_records_every_inherited_variable_of_the_families_with_its_value() -> None:
    recorded = {v["name"]: v for v in policy.provenance(INHERITED)}
    assert recorded["GGML_CUDA_DISABLE_FUSION"] == {"name": "GGML_CUDA_DISABLE_FUSION", "value": "1", "passed": True}
    assert recorded["HIP_VISIBLE_DEVICES"]["passed"] is True
    assert recorded["DFLASH_DS4_FUSED_VERIFY"]["passed"] is False  # stripped policy, still shown
    assert "PATH" not in recorded and "DS4SIM_FAULTS" not in recorded


def test_the_print_only_diagnostics_are_set_in_both_arms_under_every_prefix() -> None:
    prefixes = ("DFLASH_", "LUCE_")
    target = policy.target_only_env({}, 4, prefixes)
    spec = policy.reference_exact_env({}, 4, prefixes, "/m/draft.gguf", 3)
    for arm in (target, spec):
        for prefix in prefixes:
            assert arm.env[f"{prefix}DS4_TOKEN_TRACE"] == arm.env[f"{prefix}DS4_TIMING"] == "1"
    assert policy.check_only_activation_differs(target, spec) == []
    # an inherited value of them is stripped like any policy: the arms get ds4ci's
    inherited = policy.target_only_env({"LUCE_DS4_TIMING": "0"}, 4, prefixes)
    assert inherited.env["LUCE_DS4_TIMING"] == "1" and policy.removed_policy({"LUCE_DS4_TIMING": "0"}) == ["LUCE_DS4_TIMING"]


def test_the_exact_differential_trace_is_set_alike_in_both_arms_only_when_sandboxed() -> None:
    on = policy.common_policy(4, ("DFLASH_", "LUCE_"), exact_trace=True)
    assert on["DFLASH_DS4_EXACT_TRACE_PATH"] == "/tmp/ds4ci-exact-trace.jsonl" and on["DFLASH_DS4_EXACT_TRACE_Q"] == "1"
    assert not any(k.startswith("LUCE_DS4_EXACT_TRACE") for k in on)  # only the DFLASH_ spelling exists
    assert "DFLASH_DS4_EXACT_TRACE_PATH" not in policy.common_policy(4, ("DFLASH_", "LUCE_"))
    assert "DFLASH_DS4_EXACT_TRACE_PATH" not in policy.common_policy(4, ("LUCE_",), exact_trace=True)
    target = policy.target_only_env({}, 4, ("DFLASH_",), exact_trace=True)
    spec = policy.reference_exact_env({}, 4, ("DFLASH_",), "/m/d.gguf", 3, exact_trace=True)
    assert policy.check_only_activation_differs(target, spec) == []
    assert target.env["DFLASH_DS4_EXACT_TRACE_PATH"] == spec.env["DFLASH_DS4_EXACT_TRACE_PATH"]
