#!/usr/bin/env bash
# GRPO with verl's trainer and coderl's swe loop, sandboxes and grader (one node, one GPU as written).
# Needs verl>=0.9,<0.10 with vLLM, coderl and bubblewrap on every node that runs agent-loop workers.
#   bash examples/verl/run_grpo.sh [MODEL] [TRAIN_TASKS] [VAL_TASKS] [extra verl overrides ...]
# TRAIN_TASKS / VAL_TASKS are coderl task sources (bundled:synth, native:DIR, "swebench:FILE.jsonl?repos=DIR", ...).
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL="${1:-Qwen/Qwen3-0.6B}"
TRAIN="${2:-bundled:synth}"
VAL="${3:-bundled:warmup}"
shift $(( $# < 3 ? $# : 3 ))
DATA="${CODERL_VERL_DATA:-runs/verl-data}"

# Each row carries its whole task (snapshot included), so workers on any node rebuild it.
coderl tasks convert "$DATA/train.parquet" --format verl "tasks.source=$TRAIN"
coderl tasks convert "$DATA/val.parquet" --format verl "tasks.source=$VAL"

python3 -m verl.trainer.main_ppo \
  algorithm.adv_estimator=grpo \
  data.train_files="$DATA/train.parquet" \
  data.val_files="$DATA/val.parquet" \
  data.train_batch_size=16 \
  data.max_prompt_length=2048 \
  data.max_response_length=6144 \
  actor_rollout_ref.model.path="$MODEL" \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.ppo_mini_batch_size=16 \
  actor_rollout_ref.actor.use_kl_loss=False \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.n=4 \
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
  actor_rollout_ref.rollout.calculate_log_probs=True \
  actor_rollout_ref.rollout.prompt_length=2048 \
  actor_rollout_ref.rollout.response_length=6144 \
  actor_rollout_ref.rollout.agent.num_workers=4 \
  actor_rollout_ref.rollout.agent.agent_loop_config_path=examples/verl/agent_loops.yaml \
  trainer.n_gpus_per_node=1 \
  trainer.nnodes=1 \
  trainer.total_epochs=1 \
  trainer.test_freq=5 \
  trainer.logger='["console"]' \
  trainer.project_name=coderl-verl \
  "$@"
