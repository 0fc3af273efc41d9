# Sourced by the gpu_device*.sh scripts on a lent GPU machine: installs the wheels in .whl/
# (the packages its image lacks, and theseus) and sets the environment.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.92
