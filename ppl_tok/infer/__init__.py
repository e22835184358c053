"""Estimators over tokenizations, one algorithm per module (as Pyro's ``infer``): exact enumeration
(``exact``), importance sampling (``importance``), certified bounds and branch and bound (``search``), SMC (``smc``),
posteriors (``posterior``) and what an estimate can be trusted for (``diagnostics``)."""
