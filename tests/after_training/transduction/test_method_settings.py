from llp_tf.after_training.transduction import method_settings


def test_every_default_is_an_external_one_with_its_source():
    settings = method_settings.resolve(50, {}, num_classes=50)
    assert settings.values() == {"k": 10, "t": 25, "temperature": 0.07, "rbf_gamma": 20.0,
                                 "label_spreading_alpha": 0.99, "dmt_k": 8,
                                 "dmt_eigenvectors": 50, "dlp_k": 5}
    assert "von Luxburg 2007" in settings.dmt_k.source
    # ceil(ln 500) = 7 and C = 10 on the demo's draws of 10 classes x 50.
    demo = method_settings.resolve(50, {}, num_classes=10)
    assert (demo.dmt_k.value, demo.dmt_eigenvectors.value) == (7, 10)
    assert settings.given() == []
    assert settings.t.source == "the LLP paper's T = 25 (the authors' release: 50)"
    assert settings.label_spreading_alpha.source == "Zhou et al. 2004's alpha = 0.99"
    assert "scikit-learn" in settings.rbf_gamma.source
    as_json = settings.as_json()
    assert as_json["rule"] == "external defaults" and as_json["given_on_command_line"] == []
    by_method = as_json["methods"]
    assert by_method["local_knn"]["t"] == {"value": 25, "source": settings.t.source}
    assert by_method["label_propagation"]["rbf_gamma"]["value"] == 20.0
    assert by_method["dlp"]["k"]["value"] == 5
    assert by_method["lp_dmt"]["eigenvectors"] == {"value": 50,
                                                   "source": settings.dmt_eigenvectors.source}
    assert {name: entry["value"] for name, entry in by_method["dlp"].items()} == {
        "k": 5, "gamma": 3.0, "alpha": 0.99, "max_iter": 20, "tol": 1e-6}
    assert "none chosen on these embeddings" in settings.summary()


def test_dlp_s_k_follows_the_class_size_and_given_values_are_recorded_as_given():
    assert method_settings.resolve(500, {}, num_classes=50).dlp_k.value == 50
    settings = method_settings.resolve(50, {"t": 50, "dlp_k": 50}, num_classes=50)
    assert (settings.t.value, settings.dlp_k.value) == (50, 50)
    assert settings.given() == ["t", "dlp_k"]
    assert settings.t.source == method_settings.GIVEN
    assert settings.as_json()["given_on_command_line"] == ["t", "dlp_k"]
    assert "external defaults but --t, --dlp_k (given)" in settings.summary()
