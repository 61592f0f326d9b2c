# lit configuration for the attn compiler's tests.
import os

import lit.formats

config.name = "attnc"
config.test_format = lit.formats.ShTest(not lit_config.isWindows)
config.suffixes = [".mlir", ".test"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = getattr(config, "attnc_obj_root",
                                config.test_source_root)

# Tools resolve to the build's bin/ (attn-opt, attnc) and LLVM's tools
# (FileCheck, not); the same directories lead PATH.
tool_dirs = {
    "attn-opt": config.attnc_bin_dir,
    "attnc": config.attnc_bin_dir,
    "FileCheck": config.llvm_tools_dir,
    "not": config.llvm_tools_dir,
}
for tool, directory in tool_dirs.items():
    # A tool name not glued to other path or name characters.
    pattern = r"(?<![\w/.-])" + tool.replace("-", r"\-") + r"(?![\w/.-])"
    config.substitutions.append((pattern, os.path.join(directory, tool)))
config.substitutions.append(("%templates_dir", config.templates_dir))
config.substitutions.append(("%docs_examples", config.docs_examples_dir))
# ptxas assembles the emitted PTX in the examples test.
config.substitutions.append((r"(?<![\w/.-])ptxas(?![\w/.-])", config.ptxas_path))

config.environment["PATH"] = os.pathsep.join(
    [config.attnc_bin_dir, config.llvm_tools_dir,
     config.environment.get("PATH", os.environ.get("PATH", ""))])
# The sanitizer build's options (tools/run-tests.sh) reach the tools.
for variable in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
    if variable in os.environ:
        config.environment[variable] = os.environ[variable]
