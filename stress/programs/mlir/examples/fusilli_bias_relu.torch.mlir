// A pointwise graph in the shape fusilli emits: torch-dialect value tensors in, the result written
// in place into a mutable !torch.tensor argument, nothing returned. Compile with the torch input type.
module @module {
  func.func @main(%result_: !torch.tensor<[2,16,64,64],f32>, %arg0_x: !torch.vtensor<[2,16,64,64],f32>, %arg1_bias: !torch.vtensor<[1,16,1,1],f32>) attributes {torch.assume_strict_symbolic_shapes} {
    %int1 = torch.constant.int 1
    %0 = torch.aten.add.Tensor %arg0_x, %arg1_bias, %int1 : !torch.vtensor<[2,16,64,64],f32>, !torch.vtensor<[1,16,1,1],f32>, !torch.int -> !torch.vtensor<[2,16,64,64],f32>
    %1 = torch.aten.relu %0 : !torch.vtensor<[2,16,64,64],f32> -> !torch.vtensor<[2,16,64,64],f32>
    torch.overwrite.tensor.contents %1 overwrites %result_ : !torch.vtensor<[2,16,64,64],f32>, !torch.tensor<[2,16,64,64],f32>
    return
  }
}
