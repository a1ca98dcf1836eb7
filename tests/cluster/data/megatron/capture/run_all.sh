#!/bin/bash
# Runs Megatron's training loop (megatron-core 0.19.2's megatron.training, through
# capture_gpt.py) on one GPU for each case, keeps each run's stdout+stderr, exit code and
# the save directory's listing, and bundles them into $OUT/capture.tar.gz.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
W=/tmp/cap; rm -rf $W; mkdir -p $W/logs
S=$W/logs/summary.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch,megatron.core as m;print("torch",torch.__version__,"cuda",torch.version.cuda,"megatron-core",m.__version__)'; python3 --version; } > $S 2>&1
export PYTHONPATH=$HERE:${PYTHONPATH:-} PYTHONUNBUFFERED=1 CUDA_DEVICE_MAX_CONNECTIONS=1
export RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1
PORT=29500
COMMON="--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 256 --max-position-embeddings 256
 --micro-batch-size 4 --global-batch-size 8 --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --lr-warmup-iters 2
 --weight-decay 0.01 --clip-grad 1.0 --bf16 --transformer-impl local --no-gradient-accumulation-fusion
 --no-persist-layer-norm --no-masked-softmax-fusion
 --mock-data --tokenizer-type NullTokenizer --vocab-size 4096 --ckpt-format torch_dist
 --log-interval 5 --eval-interval 10 --eval-iters 2 --log-throughput --seed 1234 --distributed-backend nccl"

# run NAME SAVE_DIR TIMEOUT_S [extra args...]  (env CAPTURE_* set by the caller)
run() {
  local name=$1 dir=$2 tmo=$3; shift 3
  PORT=$((PORT+1)); mkdir -p $dir
  echo "== $name: python3 capture_gpt.py \$COMMON --save $dir --load $dir $* (CAPTURE_STEP_SLEEP_S=${CAPTURE_STEP_SLEEP_S:-} CAPTURE_NAN_AT=${CAPTURE_NAN_AT:-} CAPTURE_NAN_ONCE=${CAPTURE_NAN_ONCE:-})" >> $S
  local t0=$(date +%s)
  MASTER_PORT=$PORT timeout -s KILL $tmo python3 $HERE/capture_gpt.py $COMMON --save $dir --load $dir "$@" > $W/logs/$name.log 2>&1
  local rc=$?
  echo "   exit=$rc seconds=$(( $(date +%s) - t0 ))" >> $S
  (cd $dir && find . | sort > $W/logs/$name.tree.txt; find . -name '*.txt' -exec sh -c 'echo "--- $1: $(cat $1)"' _ {} \; >> $W/logs/$name.tree.txt)
  return $rc
}

# 1. normal run: 30 iterations, saves every 10, TensorBoard
run normal $W/normal/ckpt 240 --train-iters 30 --save-interval 10 --tensorboard-dir $W/normal/tb || { cp $S $OUT/; tar czf $OUT/capture.tar.gz -C $W logs; exit 1; }
(cd $W/normal && find tb | sort > $W/logs/normal.tb-tree.txt)
# 2. early exit by iteration (exit_interval=15), then 3. the resume from its save
run exit-interval $W/ei/ckpt 180 --train-iters 30 --save-interval 10 --exit-interval 15
run resume $W/ei/ckpt 180 --train-iters 30 --save-interval 10
# 4. NaN with re-runs off (Megatron-Bridge's default rerun_mode: disabled): raises
CAPTURE_NAN_AT=12 run nan-disabled $W/nd/ckpt 180 --train-iters 30 --save-interval 10 --rerun-mode disabled
# 5. NaN with re-runs on (Megatron-LM's default validate_results), reproducible: save, exit 16
CAPTURE_NAN_AT=12 run nan-validate $W/nv/ckpt 180 --train-iters 30 --save-interval 10 --rerun-mode validate_results
# 6. resume of 5 (re-run from the checkpoint on the same GPU)
CAPTURE_NAN_AT=12 run nan-validate-resume $W/nv/ckpt 180 --train-iters 30 --save-interval 10 --rerun-mode validate_results
# 7. NaN with re-runs on, transient (the re-run in place gives a finite loss): exit 17
CAPTURE_NAN_AT=12 CAPTURE_NAN_ONCE=1 run nan-transient $W/nt/ckpt 180 --train-iters 30 --save-interval 10 --rerun-mode validate_results
# 8. SIGTERM with --exit-signal-handler: sent once iteration 10 is printed
PORT=$((PORT+1)); mkdir -p $W/st/ckpt
echo "== sigterm: python3 capture_gpt.py \$COMMON --save $W/st/ckpt --load $W/st/ckpt --train-iters 1000 --save-interval 50 --exit-signal-handler (CAPTURE_STEP_SLEEP_S=0.2); kill -TERM once 'iteration       10/' is printed" >> $S
t0=$(date +%s)
CAPTURE_STEP_SLEEP_S=0.2 MASTER_PORT=$PORT python3 $HERE/capture_gpt.py $COMMON --save $W/st/ckpt --load $W/st/ckpt --train-iters 1000 --save-interval 50 --exit-signal-handler > $W/logs/sigterm.log 2>&1 &
pid=$!
for i in $(seq 1 600); do grep -q "iteration       10/" $W/logs/sigterm.log && break; kill -0 $pid 2>/dev/null || break; sleep 0.2; done
echo "   SIGTERM at $(date -u +%T.%N)" >> $S; kill -TERM $pid
( sleep 120; kill -KILL $pid 2>/dev/null ) & killer=$!
wait $pid; rc=$?; kill $killer 2>/dev/null
echo "   exit=$rc seconds=$(( $(date +%s) - t0 ))" >> $S
(cd $W/st/ckpt && find . | sort > $W/logs/sigterm.tree.txt)
# 9. early exit by time (exit_duration_in_mins=1, an int in 0.19.2): about a minute of steps
CAPTURE_STEP_SLEEP_S=0.5 run exit-duration $W/ed/ckpt 200 --train-iters 1000 --save-interval 50 --exit-duration-in-mins 1 --log-interval 10 --eval-interval 50
cat $S
cp $S $OUT/
tar czf $OUT/capture.tar.gz -C $W logs
ls -la $W/logs
