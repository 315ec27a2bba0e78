"""Lesson 09, fault tolerance: failure rates of clusters, checkpoint intervals and goodput, crash-safe
checkpoints, elastic training.

* :mod:`.checkpoint_io`: Real checkpoints: save everything a run needs, survive SIGKILL, resume bit for bit.
* :mod:`.kill_resume`: Kill a training run with SIGKILL at random points, resume it, and compare bit for bit.
* :mod:`.reliability`: Fault tolerance (容错): how often a large job fails, and how often it should checkpoint.
* :mod:`.simulate`: Monte-Carlo simulation of a checkpointed job under random failures, and of elastic training.
* :mod:`.storage`: Checkpoints as a storage burst (Tectonic-style): how many bytes, how fast, on which tier.
"""
