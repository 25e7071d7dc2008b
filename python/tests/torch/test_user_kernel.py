# A user's test file: their torch kernel against deltacheck's gate suite, one test per case.
import os

import deltacheck as dc
import user_kernels

kernel = getattr(user_kernels, os.environ.get("USER_KERNEL", "recurrent_gdr"))


@dc.cases("gate", filter=r"^gdr\(")
def test_gdr(case):
    case.check(kernel)
