"""Augmentation: the weak (`weak`) and strong (`rand_augment`) augmentations, each
beside its batched device kernel (`weak_device`, `rand_augment_device`), the
evaluation transform (`eval_transform`), and the views of one example (`views`)."""
