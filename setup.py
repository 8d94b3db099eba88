"""Builds torch_tpu._C: the C engine (C11), its CPython face (C) and the
thin C++ layer over PyTorch's device interfaces (C++17, against the
installed torch).  `make` builds the same module for the checkout."""
import glob
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _torch_paths():
    import torch.utils.cpp_extension as ce

    return ce.include_paths(), ce.library_paths()


class BuildExt(build_ext):
    """C files get C flags, C++ files C++ flags (one extension, two languages)."""

    def build_extensions(self):
        original = self.compiler._compile

        def compile_one(obj, src, ext, cc_args, extra_postargs, pp_opts):
            args = list(extra_postargs)
            if src.endswith(".cpp"):
                # AT_PER_OPERATOR_HEADERS: see CXXFLAGS_TORCH in the Makefile
                args += ["-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=1", "-DAT_PER_OPERATOR_HEADERS"]
            else:
                args += ["-std=c11"]
                if os.sep + "python" + os.sep in src:
                    args += ["-DPy_LIMITED_API=0x030B0000"]
            original(obj, src, ext, cc_args, args, pp_opts)

        self.compiler._compile = compile_one
        super().build_extensions()


sources = sorted(
    glob.glob("csrc/base/*.c") + glob.glob("csrc/pjrt/*.c") + glob.glob("csrc/hlo/*.c")
    + glob.glob("csrc/ops/*.c") + glob.glob("csrc/runtime/*.c") + glob.glob("csrc/python/*.c")
    + glob.glob("csrc/torch/*.cpp")
)

includes, libdirs = _torch_paths()

setup(
    ext_modules=[
        Extension(
            "torch_tpu._C",
            sources=sources,
            include_dirs=["csrc"] + includes,
            define_macros=[("_GNU_SOURCE", None)],
            extra_compile_args=["-O2"],
            library_dirs=libdirs,
            runtime_library_dirs=libdirs,
            libraries=["c10", "torch", "torch_cpu", "torch_python", "dl", "pthread", "m"],
            language="c++",
        )
    ],
    cmdclass={"build_ext": BuildExt},
)
