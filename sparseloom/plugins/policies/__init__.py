"""The built-in placement policies, registered through the same hook as a third party's.

``sparseloom`` (Algorithm 1 over the paper's Ω), ``sparseloom-repeat`` (the same over every
assignment, repeats allowed), ``sparseloom-contention`` (beyond the paper) and the six §5.1
baselines. The ``adms`` policy lives beside them in its own module.
"""

from __future__ import annotations

from sparseloom.core.hookspecs import RegisterFn, hookimpl


@hookimpl
def sparseloom_register_policies(register: RegisterFn) -> None:
    """Register SparseLoom's optimizer, the contention-aware one and the six baselines."""
    from sparseloom.plugins.policies.baselines import BASELINES
    from sparseloom.plugins.policies.contention import ContentionPolicy
    from sparseloom.plugins.policies.loaded import LoadedPolicy
    from sparseloom.plugins.policies.sparseloom import SparseLoomPolicy, repeat_policy

    register("sparseloom", SparseLoomPolicy, capabilities=("stitched", "partitioned"),
             description="SparseLoom Alg. 1: global order + fastest stitched variant in SLO")
    register("sparseloom-repeat", repeat_policy, capabilities=("stitched", "partitioned"),
             description="Alg. 1 over every assignment, repeats allowed (not the paper's Ω)")
    register("sparseloom-loaded", LoadedPolicy, capabilities=("stitched", "partitioned"),
             description="stitched variants + per-task processor sets for the joint load "
                         "(beyond the paper)")
    register("sparseloom-contention", ContentionPolicy,
             capabilities=("stitched", "partitioned", "contention"),
             description="order + stitched variants for loaded latency (closed-loop MVA)")
    for name, policy in BASELINES.items():
        register(name, policy, capabilities=("original",) + (
            ("partitioned",) if name.endswith("-p") else ("whole",)),
            description=(policy.__doc__ or name).splitlines()[0])
