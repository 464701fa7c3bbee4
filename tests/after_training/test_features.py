import io

import numpy as np

from llp_tf.data.sources.base import VALIDATION
from llp_tf.data.sources.registry import load_source
from llp_tf.after_training import run_loader
from llp_tf.after_training.features import extract_features
from tests.after_training.probe_images import centre_crop_features, read_folder_split


def test_features_are_the_models_pooled_output_of_centre_crops(tiny_llp_run, stripes):
    run = run_loader.load_run(tiny_llp_run)
    source = load_source(stripes)
    image_size = run.config.data.image_size
    # 40 validation images in batches of 16: the last batch has 8 padding rows.
    features = extract_features(run.model, source, VALIDATION, image_size, batch_size=16,
                                stream=io.StringIO())
    images, labels = read_folder_split(stripes, "validation")
    expected = centre_crop_features(run.model, images, image_size)
    assert features.features.shape == (40, run.model.feature_dim)
    np.testing.assert_array_equal(features.index, np.arange(40))
    np.testing.assert_array_equal(features.labels, labels)
    np.testing.assert_allclose(features.features, expected, rtol=1e-5, atol=1e-5)
