"""Which examples a run labels, uses and leaves out: the regime split (`regime`),
labelled sets given as file lists (`label_subsets`), exclude lists
(`exclusions`) and the images that cannot be decoded (`image_check`)."""
