"""Which GPU does numba-cuda allocate on inside `with cuda.gpus[1]`? (diagnostic)"""

from cuda.bindings import driver
from numba import cuda


def ordinal(array):
    err, value = driver.cuPointerGetAttribute(
        driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, array.__cuda_array_interface__["data"][0]
    )
    return err, value, type(value).__name__


for dev in range(len(cuda.gpus)):
    with cuda.gpus[dev]:
        a = cuda.device_array(1024)
        print(f"with gpus[{dev}]: numba context device {a.gpu_data.context.device.id}, driver {ordinal(a)}")
