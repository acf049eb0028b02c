"""experiments/gpu_parts_check.py (issue 56, the composite kernel on a device against the CPU in
float64) runs its device path on the CPU in float32: the two fits agree within its tolerances (ELBO
within 5 nats, the period within 0.5 %; measured at 300 steps: -174.97 against -175.76, 0.99089
against 0.99021), and a missing CUDA device is refused by name."""
import pytest
import torch


def test_the_device_path_in_float32_agrees_with_the_cpu_in_float64(capsys):
    from experiments import gpu_parts_check

    assert gpu_parts_check.main(["--device", "cpu", "--iterations", "300"]) == 0
    assert "as on the CPU" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
def test_cuda_without_a_device_is_refused():
    from experiments import gpu_parts_check

    with pytest.raises(SystemExit):
        gpu_parts_check.main(["--device", "cuda"])
