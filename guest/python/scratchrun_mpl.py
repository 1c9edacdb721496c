# matplotlib's backend in ScratchRun (MPLBACKEND=module://scratchrun_mpl; docs/decisions/0017-outputs.md):
# Agg, as before, with plt.show() and fig.show() displaying the figures as outputs
# (scratchrun_display) and closing them, as a notebook's inline backend does, and every figure
# still open when the interpreter exits shown then. A session's kernel shows the figures a cell
# leaves open at the cell's end itself (guest/session.py). A figure the code saved with savefig is
# not shown at the end (a saved and returned figure is not sent twice).
import atexit

from matplotlib.backend_bases import FigureManagerBase
from matplotlib.backends.backend_agg import FigureCanvasAgg

import scratchrun_display


class FigureCanvas(FigureCanvasAgg):
    scratchrun = True  # scratchrun_display shows only figures drawn here

    def print_figure(self, *args, **kwargs):
        result = super().print_figure(*args, **kwargs)
        scratchrun_display.saved(self.figure)
        return result


class FigureManager(FigureManagerBase):
    def show(self):
        scratchrun_display.show_figures([self.canvas.figure])


FigureCanvas.manager_class = FigureManager


def show(*args, **kwargs):
    scratchrun_display.show_figures()


# Registered after matplotlib's own (pyplot closes every figure at exit): this runs first.
atexit.register(scratchrun_display.flush)
