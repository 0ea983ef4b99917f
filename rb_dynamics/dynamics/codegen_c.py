# SPDX-License-Identifier: Apache-2.0
"""C backend of the generated kernels: the generator's own lines, one translation unit each.

Every line ``codegen`` emits after register allocation (``r3 = r1*r2 + 0.13585*q1``,
``cos``/``sin``/``sqrt``, ``repr`` float literals) is already C. Compiled with
``-ffp-contract=off`` (no fused multiply-add) and without ``-ffast-math``, C evaluates each
expression in Python's order with the same IEEE operations and the same libm ``cos``/``sin``,
so the C kernels agree with the Python ones to the last bit on one state.

Each kernel becomes ``rb_<name>`` (one state) and ``rb_<name>_n`` (a loop over a batch of
rows, see ``_ckernels.c`` for the ABI). One translation unit per kernel lets several compiler
processes run at once and lets the optimisation level follow the kernel's size.
"""

from __future__ import annotations

from .codegen_ir import KernelIR

# the per-model library ABI and the trampoline's (its rollout arguments, its kernels: momentum);
# equals RB_KERNEL_ABI in _ckernels.c, so that an extension built from an older _ckernels.c is
# not used
ABI = 4


def emit_c(ir: KernelIR) -> str:
    """The C translation unit of one kernel (empty when the kernel is undefined)."""
    if ir.error is not None:
        return ""
    params = ", ".join(f"const double *restrict {p}" for p, _ in ir.args)
    lines = [f"static void {ir.name}({params}, double *restrict out)", "{"]
    lines += [f"    const double {p}{k} = {p}[{k}];" for p, n in ir.args for k in range(n)]
    registers = sorted({line.split(" = ", 1)[0] for line in ir.body}, key=lambda r: int(r[1:]))
    if registers:
        lines.append(f"    double {', '.join(registers)};")
    lines += [f"    {line};" for line in ir.body]
    lines += [f"    out[{k}] = {x};" for k, x in enumerate(ir.outputs)]
    lines.append("}")
    one = ", ".join(f"in[{j}]" for j in range(len(ir.args)))
    row = ", ".join(f"in[{j}] + i * stride[{j}]" for j in range(len(ir.args)))
    return "\n".join([
        "#include <math.h>",
        "",
        *lines,
        "",
        f"void rb_{ir.name}(const double *const *in, double *out)",
        f"{{ {ir.name}({one}, out); }}",
        "",
        f"void rb_{ir.name}_n(long n, const double *const *in, const long *stride, double *out)",
        "{",
        "    for (long i = 0; i < n; i++)",
        f"        {ir.name}({row}, out + i * {len(ir.outputs)});",
        "}",
        "",
    ])
