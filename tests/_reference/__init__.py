"""Reference implementations (oracles) the tests check the package against.

They are not part of the package: no user path reaches them. Each module
holds the NumPy or plain-Python formulas, drivers and samplers that the
compiled package code used to carry only for its tests.
"""
