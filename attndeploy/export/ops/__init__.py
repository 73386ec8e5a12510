"""Old home of the op-set building blocks, now `attndeploy.opspec` (`_spec` -> `opspec.spec`,
`_common` -> `opspec.bodies`); the modules here re-export them. Each op is declared beside its
variant (`attndeploy/variants/<name>/op_*.py`) and `attndeploy.variants.op_registry` collects them.
"""
