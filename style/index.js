import './widget.css';
