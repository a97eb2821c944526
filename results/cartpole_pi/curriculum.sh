#!/usr/bin/env bash
# E3 (issue 12): the curriculum from scratch as zoo runs, one folder per stage (see the
# cartpole_pi_hold / _catch / _tune configs in zoo/configs/cartpole_pi.yml).
#   bash results/cartpole_pi/curriculum.sh [TUNE_STAGES] [ROOT] [HOLD] [SEED]
# TUNE_STAGES (default 6) sep-CMA-ES restarts on the true task follow the hold and catch
# stages; ROOT (default runs/cartpole_pi_curriculum) holds 1_hold, 2_catch, 3_tune, ...;
# HOLD (default cartpole_pi_hold) is stage 1's experiment, e.g. cartpole_pi_hold_harder;
# SEED (default: the configs' seed, 0) seeds every stage.
# TUNE_SET="KEY=VALUE ..." (environment) adds those config overrides to the tune stages from
# number TUNE_FROM (default 3) on, e.g. TUNE_SET=train_env_kwargs.inward_share=0.5 TUNE_FROM=7
# (a branch: copy the stages before it into a new ROOT first).
# CMA_SET="KEY=VALUE ..." adds overrides to every CMA-ES stage (catch and tune), e.g.
# CMA_SET=evaluator=processes runs their rollouts on both cores.
# Run it again after a stop: finished stages are skipped, an interrupted one resumes.
# A tune stage whose checks never beat its start hands on its start; the next one then runs
# with the seed plus its stage number, since the same start and seed would replay it exactly.
set -euo pipefail
tune=${1:-6}
root=${2:-runs/cartpole_pi_curriculum}
hold=${3:-cartpole_pi_hold}
seed=${4:-}
export OMP_NUM_THREADS=1
start=$(date +%s)
stage_seed=$seed

stage() {  # stage FOLDER EXPERIMENT [KEY=VALUE ...]; seeded with $stage_seed
  local dir=$1 name=$2
  shift 2
  set -- "$@" ${stage_seed:+"seed=$stage_seed"}
  if [[ -f $dir/model.pt ]]; then
    echo "$dir: done"
  elif [[ -f $dir/config.yml ]]; then
    attn-zoo train --resume "$dir" --no-progress
  else
    attn-zoo train "$name" --budget cpu --run-dir "$dir" --no-progress ${1:+--set "$@"}
  fi
  echo "$dir: finished, $(( ($(date +%s) - start) / 60 )) min since this script started"
}

kept_start() {  # kept_start FOLDER: no check of that stage beat its generation-0 check
  python -c 'import json, sys
checks = json.load(open(sys.argv[1]))
sys.exit(0 if max(checks, key=lambda e: e["test_mean"])["generation"] == 0 else 1)' "$1/evaluations.json"
}

stage "$root/1_hold" "$hold"
read -r -a cma <<< "${CMA_SET:-}"
read -r -a tune_set <<< "${TUNE_SET:-}"
stage "$root/2_catch" cartpole_pi_catch "init=$root/1_hold" ${cma[@]+"${cma[@]}"}
previous=$root/2_catch
for ((k = 3; k < 3 + tune; k++)); do
  extra=(${cma[@]+"${cma[@]}"})
  if [[ $k -ge ${TUNE_FROM:-3} ]]; then
    extra+=(${tune_set[@]+"${tune_set[@]}"})
  fi
  stage_seed=$seed
  if [[ $k -gt 3 ]] && kept_start "$previous"; then
    stage_seed=$(( ${seed:-0} + k ))
  fi
  stage "$root/${k}_tune" cartpole_pi_tune "init=$previous" ${extra[@]+"${extra[@]}"}
  previous=$root/${k}_tune
done
attn-zoo evaluate "$previous" --episodes 1000
