"""Builds torch_tpu._C: the C engine (C11), its CPython face (C) and the
thin C++ layer over PyTorch's device interfaces (C++17, against the
installed torch).  `make` builds the same module for the checkout."""
import glob
import os
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _torch_paths():
    import torch.utils.cpp_extension as ce

    return ce.include_paths(), ce.library_paths()


def _default_jobs():
    """One compile per core, at most one per 1.5 GiB of available memory (a
    C++ file over torch's headers peaks at ~1.4 GiB), as the Makefile."""
    n = os.cpu_count() or 1
    try:
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
        n = min(n, max(1, kib // (1536 * 1024)))
    except (OSError, StopIteration, ValueError):
        pass
    return n


class BuildExt(build_ext):
    """C files get C flags, C++ files C++ flags (one extension, two
    languages); its sources compile in parallel (build_ext --parallel N, else
    MAX_JOBS as for torch's extensions, else _default_jobs())."""

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
        jobs = int(self.parallel or 0) or int(os.environ.get("MAX_JOBS") or 0) or _default_jobs()
        if jobs > 1:
            compile_all = self.compiler.compile

            def compile_parallel(sources, *args, **kwargs):
                # the C++ files (seconds each) first, the C files fill in
                order = sorted(sources, key=lambda src: not str(src).endswith(".cpp"))
                with ThreadPoolExecutor(jobs) as pool:
                    objects = dict(zip(order, pool.map(lambda src: compile_all([src], *args, **kwargs), order)))
                return [obj for src in sources for obj in objects[src]]

            self.compiler.compile = compile_parallel
        super().build_extensions()


sources = sorted(
    glob.glob("csrc/base/*.c") + glob.glob("csrc/pjrt/*.c") + glob.glob("csrc/hlo/*.c")
    + glob.glob("csrc/ops/*.c") + glob.glob("csrc/runtime/*.c") + glob.glob("csrc/python/*.c")
    + glob.glob("csrc/torch/*.cpp")
)

includes, libdirs = _torch_paths()
includes = includes + [os.path.join(includes[0], "kineto")]  # csrc/torch/profiler.cpp: libkineto's plugin interface

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
