"""transformers' ModelTesterMixin and ConfigTester on this package's transformers classes.

Not collected here: ``test_transformers_suite.py`` copies it into the ``tests/`` tree of the transformers sdist
(as ``tests/models/structinit_vit/test_modeling_structinit_vit.py``), beside the mixins it imports, and runs it
there. Modelled on transformers' own ``tests/models/timm_wrapper/test_modeling_timm_wrapper.py``.
"""

import inspect
import unittest

import torch
from torch import nn
from transformers import TimmWrapperConfig

from structinit_hf import StructInitViTConfig, StructInitViTForImageClassification, StructInitViTModel

from ...test_configuration_common import ConfigTester
from ...test_modeling_common import ModelTesterMixin, floats_tensor

# 16 px, patch 4 (4 x 4 tokens), 32 wide, 2 heads, 2 blocks: an impulse ViT small enough for every common test
MODEL_ARGS = dict(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2, kernel_size=3)


class StructInitViTModelTester:
    def __init__(self, parent, batch_size=3, image_size=16, num_channels=3, num_labels=5):
        self.parent = parent
        self.batch_size = batch_size
        self.image_size = image_size
        self.num_channels = num_channels
        self.num_labels = num_labels
        self.is_training = True

    def get_config(self):
        return StructInitViTConfig(model_args=dict(MODEL_ARGS), num_labels=self.num_labels)

    def prepare_config_and_inputs(self):
        pixels = floats_tensor([self.batch_size, self.num_channels, self.image_size, self.image_size])
        return self.get_config(), pixels

    def prepare_config_and_inputs_for_common(self):
        config, pixel_values = self.prepare_config_and_inputs()
        return config, {"pixel_values": pixel_values}


class StructInitViTModelTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (StructInitViTModel, StructInitViTForImageClassification)
    test_resize_embeddings = False
    test_head_masking = False
    test_pruning = False
    has_attentions = False  # timm's fused attention returns no maps (as for every TimmWrapper model)
    test_model_parallel = False

    def setUp(self):
        self.model_tester = StructInitViTModelTester(self)
        self.config_tester = ConfigTester(
            self, config_class=StructInitViTConfig, has_text_modality=False, common_properties=[]
        )

    def test_config(self):
        self.config_tester.run_common_tests()

    def test_forward_signature(self):
        config, _ = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_model_classes:
            arg_names = list(inspect.signature(model_class(config).forward).parameters)
            self.assertListEqual(arg_names[:1], ["pixel_values"])

    def test_hidden_states_output(self):
        """timm's forward_intermediates: the tokens after every block (4 x 4 grid, NCHW), selectable by index."""
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_model_classes:
            model = model_class(config).eval()
            with torch.no_grad():
                hidden = model(**inputs, output_hidden_states=True).hidden_states
                self.assertEqual([tuple(h.shape[1:]) for h in hidden], [(32, 4, 4)] * MODEL_ARGS["depth"])
                last = model(**inputs, output_hidden_states=[-1]).hidden_states
            self.assertEqual(len(last), 1)
            torch.testing.assert_close(last[0], hidden[-1])

    def test_model_get_set_embeddings(self):
        """An image model's input embedding is its patch embedding (as transformers' ViT test checks), not a
        token ``nn.Embedding``; it can be replaced, and there are no output embeddings."""
        config, _ = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_model_classes:
            model = model_class(config)
            self.assertIs(model.get_input_embeddings(), model.timm_model.patch_embed)
            replacement = nn.Identity()
            model.set_input_embeddings(replacement)
            self.assertIs(model.get_input_embeddings(), replacement)
            self.assertIsNone(model.get_output_embeddings())

    def test_training(self):
        """The classifier's loss reaches every parameter (the features-only model returns no loss, as for
        transformers' own base models, which the mixin skips by name)."""
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        model = StructInitViTForImageClassification(config).train()
        labels = torch.arange(self.model_tester.batch_size) % self.model_tester.num_labels
        model(**inputs, labels=labels).loss.backward()
        missing = [name for name, p in model.named_parameters() if p.grad is None]
        self.assertEqual(missing, [])

    @unittest.skip(
        reason="TimmWrapper returns timm's forward_intermediates (NCHW copies of each block's tokens), which are off "
        "the output's path; transformers skips this test for TimmWrapper models for the same reason"
    )
    def test_retain_grad_hidden_states_attentions(self):
        pass

    def test_config_is_transformers_timm_wrapper_config(self):
        self.assertTrue(issubclass(StructInitViTConfig, TimmWrapperConfig))
        self.assertEqual(StructInitViTConfig().architecture, "vit_tiny_impulse3")
