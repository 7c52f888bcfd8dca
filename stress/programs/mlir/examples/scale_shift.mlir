// A plain func.func user program: tensor arguments in, tensor results out.
func.func @main(%x: tensor<8x32xf32>, %s: tensor<8x32xf32>) -> tensor<8x32xf32> {
  %0 = arith.mulf %x, %s : tensor<8x32xf32>
  %1 = math.tanh %0 : tensor<8x32xf32>
  return %1 : tensor<8x32xf32>
}
