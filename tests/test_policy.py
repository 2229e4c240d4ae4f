"""The arms' environments: inherited policy stripped, common policy fixed, only activation differs."""

from __future__ import annotations

from ds4ci import policy

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
}


def test_inherited_policy_is_removed_from_both_arms() -> None:
    target = policy.target_only_env(INHERITED, 4)
    spec = policy.reference_exact_env(INHERITED, 4, "/m/draft.gguf", 3)
    for arm in (target, spec):
        assert "DFLASH_DS4_FUSED_VERIFY" not in arm.env
        assert "DFLASH_EXPERT_CACHE" not in arm.env and "DFLASH_MOE_TOPK" not in arm.env
        assert "DFLASH_MMQ_SUB_BATCH" not in arm.env
        assert "GGML_BATCH_PEER_COPIES" not in arm.env and "GGML_CUDA_BATCH_PEER_COPIES" not in arm.env
        assert "LUCE_DS4_SPEC_REFERENCE_EXACT" not in arm.env
        assert "LUCE_EXPERT_X" not in arm.env and "LUCE_MOE_Y" not in arm.env
        assert arm.env["LUCE_MMVQ_MAX_NCOLS"] == "4"
        assert arm.env["PATH"] == "/usr/bin"  # non-policy variables pass through
    assert "DFLASH_DS4_SPEC_Q" not in target.env
    assert spec.env["DFLASH_DS4_SPEC_Q"] == "3"


def test_arms_differ_only_in_activation_variables() -> None:
    target = policy.target_only_env(INHERITED, 4)
    spec = policy.reference_exact_env(INHERITED, 4, "/m/draft.gguf", 2)
    assert policy.difference(target, spec) == [
        "DFLASH_DS4_DRAFT", "DFLASH_DS4_SPEC", "DFLASH_DS4_SPEC_Q", "DFLASH_DS4_SPEC_REFERENCE_EXACT",
    ]
    assert policy.check_only_activation_differs(target, spec) == []
    assert spec.env["DFLASH_DS4_SPEC_REFERENCE_EXACT"] == "1" and spec.env["DFLASH_DS4_SPEC"] == "1"


def test_a_difference_outside_activation_is_reported() -> None:
    target = policy.target_only_env(INHERITED, 4)
    spec = policy.reference_exact_env(INHERITED, 4, "/m/draft.gguf", 2)
    tampered = policy.ArmEnvironment(spec.arm, spec.q, {**spec.env, "DFLASH_DS4_FUSED_VERIFY": "1"})
    assert policy.check_only_activation_differs(target, tampered) == ["DFLASH_DS4_FUSED_VERIFY"]


def test_removed_lists_names_only_and_policy_part_is_sorted() -> None:
    removed = policy.removed_policy(INHERITED)
    assert "DFLASH_DS4_FUSED_VERIFY" in removed and "PATH" not in removed and "DS4SIM_FAULTS" not in removed
    part = policy.target_only_env(INHERITED, 4).policy()
    assert list(part) == sorted(part)
    assert part == policy.common_policy(4)


def test_job_credentials_never_reach_the_server_under_test() -> None:
    inherited = {**INHERITED, "GITHUB_TOKEN": "ghs_x", "ACTIONS_RUNTIME_TOKEN": "y", "GH_TOKEN": "z"}
    for arm in (policy.target_only_env(inherited, 4), policy.reference_exact_env(inherited, 4, "/d", 2)):
        assert not {"GITHUB_TOKEN", "ACTIONS_RUNTIME_TOKEN", "GH_TOKEN"} & set(arm.env)
