# SPDX-License-Identifier: Apache-2.0
"""The C extension ``_ckernels`` (built by setup.py, optional): the fixed trampoline from Python
into a model's compiled kernels, loaded by ``rb_dynamics.dynamics.kernel_cache``.

A package of its own, importing nothing, so that importing the extension is an import of this
package and not of ``rb_dynamics.dynamics``, whose face re-exports ``kernel_cache``.
"""
