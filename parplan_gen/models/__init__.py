"""models: what is trained.

Owns the two kinds of model (a transformer's ModelSpec read from a Hugging Face config or a
preset; an op graph from YAML/JSON/ONNX wrapped as a GraphModelSpec), their op graphs,
`kind.TrainedModel`, the one interface both kinds implement and the layers above read (they
never ask which class a model is; `any_model` gives one kind's own fields, typed), and
`load.load_model`, which turns a path or a preset name into one. May import `inputs` only.
"""
