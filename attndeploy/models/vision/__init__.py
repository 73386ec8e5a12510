"""Image models with every attention variant (issue #53; docs/images.md).

    config.py      ImageModelConfig: the architecture, sizes and the variant's settings
    attention.py   the variant's layer for one attention block, GA-Net's gates over positions
    vit.py         VisionTransformer: patches as tokens
    aacnn.py       AttentionAugmentedCNN: conv features concatenated with attention (AA-ResNet)
    checkpoint.py  config.json + model.safetensors (with the preprocessing), written all or none
    fit.py         training on an image folder, beside logistic regression on the pixels
"""
