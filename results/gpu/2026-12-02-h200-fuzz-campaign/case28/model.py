# simaccel fuzz: H200 2026-12-02 campaign seed 7 case 28: output (native) mismatch 0.267
# parameters bound as constants: [] (their values are in inputs.npz)
from tvm.script import ir as I
from tvm.script import relax as R

@I.ir_module
class Module:
    @R.function
    def main(x0: R.Tensor((13, 1, 1, 7), dtype="float32"), w3: R.Tensor((3, 1, 1, 1), dtype="float32"), w6: R.Tensor((5, 3, 1, 3), dtype="float32"), bias8: R.Tensor((1, 1), dtype="float32"), g10: R.Tensor((1, 1), dtype="float32"), b11: R.Tensor((1, 1), dtype="float32"), w14: R.Tensor((2, 1), dtype="float32"), bias17: R.Tensor((2,), dtype="float32")) -> R.Tensor((1, 2), dtype="float32"):
        with R.dataflow():
            lv: R.Tensor((13, 1, 1, 7), dtype="float32") = R.nn.softmax(x0, axis=-1)
            lv1: R.Tensor((13, 1, 1, 7), dtype="float32") = R.nn.avg_pool2d(x0, pool_size=[1, 1], strides=[1, 1], dilation=[1, 1], padding=[0, 0, 0, 0], ceil_mode=True, count_include_pad=False, layout="NCHW", out_layout="NCHW")
            lv2: R.Tensor((13, 3, 2, 10), dtype="float32") = R.nn.conv2d(x0, w3, strides=[1, 1], padding=[1, 2, 0, 1], dilation=[1, 1], groups=1, data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW", out_dtype=None)
            lv3: R.Tensor((13, 3, 2, 10), dtype="float32") = R.nn.relu(lv2)
            lv4: R.Tensor((13, 5, 2, 8), dtype="float32") = R.nn.conv2d(lv2, w6, strides=[2, 1], padding=[1, 0, 1, 0], dilation=[2, 1], groups=1, data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW", out_dtype=None)
            lv5: R.Tensor((13, 5, 2, 8), dtype="float32") = R.add(lv4, bias8)
            lv6: R.Tensor((1, 1), dtype="float32") = R.nn.layer_norm(bias8, g10, b11, axes=[-2, -1], epsilon=1.0000000000000001e-05, center=True, scale=True)
            lv7: R.Tensor((1, 1), dtype="float32") = R.strided_slice(g10, (1,), (0,), (1,), (2,), assume_inbound=False)
            lv8: R.Tensor((1, 2), dtype="float32") = R.permute_dims(w14, axes=None)
            lv9: R.Tensor((1, 2), dtype="float32") = R.matmul(lv6, lv8, out_dtype=None)
            lv10: R.Tensor((1, 2), dtype="float32") = R.add(lv9, bias17)
            gv: R.Tensor((1, 2), dtype="float32") = lv10
            R.output(gv)
        return gv