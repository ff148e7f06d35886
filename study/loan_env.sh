# Sourced by the loan scripts (study/zoo_loan.sh, study/gpu_speed_probe.sh) on a lent GPU: the libraries the machine's
# image lacks (timm 1.0.31, datasets: data/device-wheels, carried), offline Hugging Face, loader workers sharing
# through files, and the versions and the card in the log ($keep/loan.log).
if ! python3 -c "import datasets, timm; from packaging.version import Version
assert Version(timm.__version__) >= Version('1.0.31')" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site data/device-wheels/*.whl || return 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
# loader workers hand batches over through files: an earlier loan's sandbox failed the default ("received 0 items of
# ancdata") and every loan since trained with file_system sharing
mkdir -p /tmp/sharing && echo 'import torch.multiprocessing as m; m.set_sharing_strategy("file_system")' \
    > /tmp/sharing/sitecustomize.py && export PYTHONPATH=/tmp/sharing:$PYTHONPATH
python3 -c "import torch, timm, transformers, datasets, accelerate, os
print('versions: torch', torch.__version__, 'timm', timm.__version__, 'transformers', transformers.__version__,
      'datasets', datasets.__version__, 'accelerate', accelerate.__version__)
print('device:', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu', '| cpus:', os.cpu_count())
" 2>&1 | tee -a "$keep/loan.log" || return 1

