"""Bayesian mixture of experts with a diversity-promoting prior (METHODS.md section 3).

So far the von Mises-Fisher utilities (``_vmf``) and the mutual angular
regularizer (``_angular``); the estimator is not built yet.
"""
