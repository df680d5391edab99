"""Custom serializer (seeds 000 and 001, "Custom Serializer"): the documents' CustomSerializer, used for real.

DataFrames travel as parquet, integers as 4 bytes, everything else through cloudpickle; a one-byte tag in front
says which. The class is the documents' code with one fix, marked FIX below: the documents read the tag with
ObjType(payload[0]), but indexing bytes gives an int (68 for b"D"), which is no ObjType value, so every
deserialize() raised ValueError; payload[0:1] is the one-byte bytes the enum holds.
Needs pandas and pyarrow (for parquet). Run it with: python examples/custom_serializer.py
"""

import enum
import pickle
import struct
from io import BytesIO
from typing import Any

import pandas as pd
from cloudpickle import cloudpickle

from scaler import Client, SchedulerClusterCombo, Serializer


class ObjType(enum.Enum):
    General = b"G"
    Integer = b"I"
    DataFrame = b"D"


class CustomSerializer(Serializer):
    @staticmethod
    def serialize(obj: Any) -> bytes:
        if isinstance(obj, pd.DataFrame):
            buf = BytesIO()
            obj.to_parquet(buf)
            return ObjType.DataFrame.value + buf.getvalue()

        if isinstance(obj, int):
            return ObjType.Integer.value + struct.pack("I", obj)

        return ObjType.General.value + cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def deserialize(payload: bytes) -> Any:
        obj_type = ObjType(payload[0:1])  # FIX: the documents have ObjType(payload[0]), an int: always ValueError
        payload = payload[1:]

        if obj_type == ObjType.DataFrame:
            buf = BytesIO(payload)
            return pd.read_parquet(buf)

        if obj_type == ObjType.Integer:
            return struct.unpack("I", payload)[0]

        return cloudpickle.loads(payload)


def add(a, b):
    return a + b


def double(df: pd.DataFrame) -> pd.DataFrame:
    return df * 2


def main():
    address = "tcp://127.0.0.1:2345"
    cluster = SchedulerClusterCombo(address=address, n_workers=2)

    with Client(address=address, serializer=CustomSerializer) as client:
        # serialize() runs for `add`, for 1 and for 2 here, and on the worker for the result, 3
        print(client.submit(add, 1, 2).result())  # 3

        df = pd.DataFrame({"x": [1, 2, 3], "y": [0.5, 1.5, 2.5]})
        doubled = client.submit(double, df).result()  # the DataFrame goes both ways as parquet
        print(doubled.to_dict(orient="list"))  # {'x': [2, 4, 6], 'y': [1.0, 3.0, 5.0]}

    cluster.shutdown()


if __name__ == "__main__":
    main()
