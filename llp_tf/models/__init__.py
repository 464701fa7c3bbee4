"""Networks: pre-activation ResNet trunks (`resnet_v2`), the two-headed LLP model
(`embedding_classifier`), their construction from a config (`factory`, `config`), batch norm
and mixed precision. Import the names from those modules."""
