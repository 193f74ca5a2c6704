import os
import re

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

import torch

torch.set_num_threads(1)


# -- `make test-fast` -------------------------------------------------------------------------------------------
# The tests below get the `slow` marker, which `make test-fast` (pytest -m "not slow") leaves out; `make test` runs
# everything. Chosen from pytest --durations on this 2-core machine (2026-12-04, under load): a test that took 5 s
# or more there (about 2 s idle), and whole files that start protocol peers or train runs end to end. Modules that
# are all slow (learning runs, MJX) say so themselves with `pytestmark = pytest.mark.slow`. An entry is a file, a
# test or a test with its parameters; `*` matches anything.
SLOW = (
    "tests/algos/test_contracts.py::test_a_policy_class_in_one_module_trains_evaluates_exports_and_deploys",
    "tests/real_robot/test_arm_scene.py::test_a_distilled_student_goes_to_the_instructed_cube_on_the_franka_peer",
    "tests/real_robot/test_deploy.py",
    "tests/real_robot/test_faults.py",
    "tests/real_robot/test_franka.py",
    "tests/real_robot/test_go2.py",
    "tests/real_robot/test_network.py",
    "tests/real_robot/test_ur.py",
    "tests/algos/test_bc.py",
    "tests/algos/test_hostile_checkpoints.py",
    "tests/algos/test_ppo_policy_classes.py",
    "tests/algos/test_resume.py",
    "tests/algos/test_checkpoint.py::test_one_process_trains_a_run_at_a_time_and_a_killed_one_frees_it",
    "tests/algos/test_finetune_options.py::test_evaluation_and_loading_use_the_fine_tuned_weights",
    "tests/algos/test_finetune_options.py::test_per_step_residual_resumes_exactly",
    "tests/algos/test_finetune_options.py::test_residual_needs_a_base_and_trains_only_the_residual",
    "tests/algos/test_metrics_log.py::test_a_checkpoint_or_config_write_that_fails_is_a_clear_error_and_loses_nothing",
    "tests/algos/test_metrics_log.py::test_a_run_that_never_checkpointed_is_trained_from_the_beginning_on_resume",
    "tests/algos/test_metrics_log.py::test_writes_that_fail_during_resume_lose_no_metrics",
    "tests/data/test_collect.py::test_overwrite_deletes_only_the_files_of_a_dataset_policyforge_wrote",
    "tests/data/test_recovery.py::test_lost_episodes_metadata_is_rebuilt_from_the_data_files_not_deleted",
    "tests/policies/test_export.py::test_a_finite_policy_is_exported_with_its_graphs_sha256_and_source",
    "tests/policies/test_export.py::test_a_per_step_residual_moves_its_base_graph_into_place_too",
    "tests/policies/test_generative.py::test_per_step_residual_corrects_every_action_of_its_bases_chunks",
    "tests/policies/test_generative.py::test_stochastic_flow_chains_keep_the_data_distribution[reinflow]",
    "tests/policies/test_policy_contract.py::test_bc_loss_fits_demonstrations[diffusion_*]",
    "tests/policies/test_policy_contract.py::test_bc_loss_fits_demonstrations[flow_image]",
    "tests/policies/test_policy_contract.py::test_bc_loss_fits_demonstrations[meanflow_1]",
    "tests/policies/test_policy_contract.py::test_bc_loss_fits_demonstrations[residual_*]",
    "tests/policies/test_policy_contract.py::test_export_reproduces_act[*-onnx-.onnx]",  # torchscript stays fast
    "tests/policies/test_policy_contract.py::test_export_reproduces_act[diffusion_unet-*]",
    "tests/test_cli.py::test_train_leaves_checkpoint_plots_video_logs_and_config",
    "tests/test_cli.py::test_eval_and_export",
    "tests/test_cli.py::test_resume_can_extend_a_finished_run",
    "tests/test_cli.py::test_a_run_is_never_overwritten",
    "tests/test_cli.py::test_collect_writes_a_dataset_that_reads_back",
    "tests/test_cli.py::test_the_bc_recipe_trains_evaluates_films_and_exports",
    "tests/test_cli.py::test_bc_dataset_problems_are_config_errors_on_bc_dataset",
    "tests/test_config_properties.py::test_any_value_of_any_field_loads_or_is_refused_naming_it",
    "tests/test_config_properties.py::test_every_accepted_value_trains_with_finite_numbers",
    "tests/test_paths.py::test_demo_starts_afresh_but_only_over_its_own_files",
    "tests/test_robustness_bench.py::test_a_refused_override_runs_end_to_end_and_prints_the_summary_last",
)


def _slow(nodeid: str) -> bool:
    """Whether a SLOW entry names this test: the file, the test (any parameters) or the test with its parameters."""
    for entry in SLOW:
        pattern = re.escape(entry).replace(r"\*", ".*")
        if re.fullmatch(rf"{pattern}(::.*|\[.*)?", nodeid):
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _slow(item.nodeid):
            item.add_marker(pytest.mark.slow)
