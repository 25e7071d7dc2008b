# A user's test file: their torch kernel's gradients (torch.autograd) against deltacheck's
# gdr_grad cases, one test per case; here the gate suite's fp32 ones (30 cases).
import os

import deltacheck as dc
import user_kernels

kernel = getattr(user_kernels, os.environ.get("USER_KERNEL", "recurrent_gdr"))


@dc.cases("gate", filter=[r"^gdr_grad\(", "dtype=fp32"])
def test_gdr_grad(case):
    case.check(kernel)
