"""Lesson 10, parameter-efficient fine-tuning: adapters, prefix tuning, LoRA and QLoRA, counted and trained.

* :mod:`.accounting`: Parameter-efficient fine-tuning at scale: trainable-parameter counts and fine-tuning memory.
* :mod:`.finetune`: Pre-train the tiny transformer on one synthetic task, then fine-tune it on a shifted one, four ways.
* :mod:`.models`: A one-block transformer classifier with four ways to fine-tune it, forward and backward by hand.
* :mod:`.nf4`: NF4 storage as QLoRA keeps it: 4-bit codes, block-wise absmax constants, and those constants in 8 bits.
"""
