"""Builds the C engine into the torch_tpu._C extension (limited API, abi3)."""
import glob

from setuptools import Extension, setup

sources = sorted(
    glob.glob("csrc/base/*.c") + glob.glob("csrc/pjrt/*.c") + glob.glob("csrc/hlo/*.c")
    + glob.glob("csrc/ops/*.c") + glob.glob("csrc/runtime/*.c") + glob.glob("csrc/python/*.c")
)

setup(
    ext_modules=[
        Extension(
            "torch_tpu._C",
            sources=sources,
            include_dirs=["csrc"],
            define_macros=[("Py_LIMITED_API", "0x030B0000"), ("_GNU_SOURCE", None)],
            extra_compile_args=["-std=c11", "-O2"],
            libraries=["dl", "pthread", "m"],
            py_limited_api=True,
        )
    ],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
