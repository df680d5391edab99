# docs/guide/graphs.md, "Dask collections": Dask arrays, bags, dataframes and delayed values computed by a Scaler
# cluster, with the client as Dask's scheduler.
import dask
import dask.array as da
import dask.bag as db
import dask.dataframe as dd
import pandas as pd

from scaler import Client, SchedulerClusterCombo


def inc(i):
    return i + 1


with SchedulerClusterCombo(n_workers=2) as cluster, Client(address=cluster.address) as client:
    x = da.arange(100, chunks=10).reshape(10, 10)
    bag = db.from_sequence(range(10), npartitions=2).map(inc).filter(lambda i: i % 2 == 0)
    frame = dd.from_pandas(pd.DataFrame({"k": [1, 2, 1, 2], "v": [1, 2, 3, 4]}), npartitions=2)

    print(dask.compute(x.sum(), bag.fold(lambda a, b: a + b), scheduler=client))  # (np.int64(4950), 30)
    print(frame.groupby("k").v.sum().compute(scheduler=client.dask_get).to_dict())  # {1: 4, 2: 6}

    with dask.config.set(scheduler=client):  # every compute in the block
        print(dask.delayed(inc)(41).compute())  # 42
        y = (x + 1).persist()  # computed by the cluster; y's chunks are now numpy arrays in this process
        print(y.mean().compute())  # 50.5

    print(client.dask_get({("x", 0): 1, ("x", 1): (inc, ("x", 0))}, [[("x", 0), ("x", 1)]]))  # ((1, 2),)
